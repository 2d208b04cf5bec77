"""Everything that talks to C, in one room: ``gst`` (loading GStreamer's libraries, ``bind``, reads that beat
gst-python on per-frame paths), ``structs`` (the hand-declared C struct layouts and the versions they hold for),
``cuda`` (the one libcuda binding and ``check_cu``; libgstcuda's per-frame calls), ``nvrtc`` (CUDA kernels compiled
at run time), ``cc`` (C loops built with the machine's compiler) and ``analytics`` (GstAnalytics' C calls and the
compiled metadata loops). Nothing here imports torch or gi at module import."""
