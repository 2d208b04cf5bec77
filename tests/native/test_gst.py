"""native.gst: the struct reads that replace gst-python calls on per-frame paths agree with gst-python."""
from __future__ import annotations

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.native.gst import buffer_pts

Gst.init(None)


def test_buffer_pts_reads_what_gst_python_reads() -> None:
    buf = Gst.Buffer.new_allocate(None, 8, None)
    assert buffer_pts(buf) == buf.pts == Gst.CLOCK_TIME_NONE  # unset
    for pts in (0, 1, 33_366_666, 2**40 + 7):
        buf.pts = pts
        buf.dts, buf.duration = pts + 5, 40  # the neighbouring fields must not leak in
        assert buffer_pts(buf) == pts
