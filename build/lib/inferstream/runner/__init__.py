"""The runner: what happens to a buffer between an element's ``do_transform_ip`` and its return, without GStreamer.

- ``settings``: pyinfer's property values → ``InferConfig`` and the secondary mode's settings (parsed and checked
  here, not in the element);
- ``stream``: one stream's path (``StreamRunner.process``): skip (``interval``), map (``frames.memory``), infer in
  the batch group (``batching``, ``inference.ModelStep``), write (``meta.writers`` / ``meta.nvds``), track;
- ``tracking``: where tracking runs (``TrackStage``, ``track_batch``): in the batch, for trackers registered with
  their stream of the group, or in pytracker's own streaming thread;
- ``swap``: hot swap (a model set while PLAYING loads on a background thread, then swaps in between batches).

The elements (``elements/``) are shells around these: properties, caps, CUDA context, lifecycle, errors.
"""
