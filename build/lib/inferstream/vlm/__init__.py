"""Vision-language models for pyvlm, without GStreamer: requests and answers (``types``), what to send when
(``select``), the in-process transformers and OpenAI-HTTP backends (``backends``), and the worker that runs them off
the streaming thread with a bounded queue (``service``)."""
