"""Pad templates shared by the video elements."""
from __future__ import annotations

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

from inferstream.frames.raw import PACKED_FORMATS, PLANAR_FORMATS  # noqa: E402


def system_video_caps(formats: tuple[str, ...] = PACKED_FORMATS + PLANAR_FORMATS) -> Gst.Caps:
    return Gst.Caps.from_string(f"video/x-raw, format=(string){{ {', '.join(formats)} }}, "
                                "width=(int)[1, 32767], height=(int)[1, 32767], framerate=(fraction)[0/1, MAX]")


def any_video_caps() -> Gst.Caps:
    """Video in any format and memory: for elements that only read or add metadata."""
    return Gst.Caps.from_string("video/x-raw(ANY)")


def video_templates(caps: Gst.Caps) -> tuple[Gst.PadTemplate, Gst.PadTemplate]:
    return (Gst.PadTemplate.new("sink", Gst.PadDirection.SINK, Gst.PadPresence.ALWAYS, caps),
            Gst.PadTemplate.new("src", Gst.PadDirection.SRC, Gst.PadPresence.ALWAYS, caps))
