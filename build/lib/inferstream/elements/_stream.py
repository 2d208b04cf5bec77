"""Per-stream identity that travels with the data: a custom sticky event ``inferstream/stream-info``.

pyinfer sends it downstream after each STREAM_START (stream-id: the property, else the stream-start's own id;
source-id: the property, else the instance's position in its batch-group). Being sticky, every downstream element
(pytracker, pymsgconv, a user's probe) reads it from its own sink pad at any time without it being in the labels.
"""
from __future__ import annotations

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.gstcompat import structure

STREAM_INFO = "inferstream/stream-info"


def stream_info_event(stream_id: str, source_id: int) -> Gst.Event:
    structure = Gst.Structure.new_empty(STREAM_INFO)
    structure.set_value("stream-id", stream_id)
    structure.set_value("source-id", source_id)
    return Gst.Event.new_custom(Gst.EventType.CUSTOM_DOWNSTREAM_STICKY, structure)


def read_stream_info(pad: Gst.Pad) -> tuple[str, int] | None:
    """(stream-id, source-id) from the sticky event on ``pad``, or None when no pyinfer is upstream."""
    index = 0
    while (event := pad.get_sticky_event(Gst.EventType.CUSTOM_DOWNSTREAM_STICKY, index)) is not None:
        info = structure(event.get_structure())
        if info is not None and info.get_name() == STREAM_INFO:
            return info.get_value("stream-id"), info.get_value("source-id")
        index += 1
    return None
