"""Rendered test streams with exact ground truth, pushed through appsrc (no files needed)."""
from __future__ import annotations

import gi
import numpy as np

gi.require_version("Gst", "1.0")
from gi.repository import Gst

SQUARE = 24


def red_square_position(stream: int, frame: int, width: int, height: int) -> tuple[int, int]:
    """Top-left of stream ``stream``'s red square on frame ``frame``: unique per (stream, frame) pair."""
    x = (8 + 3 * frame + 37 * stream) % (width - SQUARE)
    y = (6 + 2 * frame + 29 * stream) % (height - SQUARE)
    return x, y


def render(stream: int, frame: int, width: int, height: int) -> np.ndarray:
    img = np.zeros((height, width, 3), np.uint8)
    x, y = red_square_position(stream, frame, width, height)
    img[y:y + SQUARE, x:x + SQUARE, 0] = 230
    return img


def feed(appsrc: Gst.Element, stream: int, frames: int, width: int, height: int, fps: int = 25) -> None:
    """Queue ``frames`` rendered RGB frames (pts = index / fps) and EOS on an appsrc."""
    appsrc.set_property("caps", Gst.Caps.from_string(
        f"video/x-raw,format=RGB,width={width},height={height},framerate={fps}/1"))
    appsrc.set_property("format", Gst.Format.TIME)
    appsrc.set_property("max-bytes", 0)
    for i in range(frames):
        buf = Gst.Buffer.new_wrapped(render(stream, i, width, height).tobytes())
        buf.pts = i * Gst.SECOND // fps
        buf.duration = Gst.SECOND // fps
        appsrc.emit("push-buffer", buf)
    appsrc.emit("end-of-stream")


def frame_index(buf: Gst.Buffer, fps: int = 25) -> int:
    return round(buf.pts * fps / Gst.SECOND)
