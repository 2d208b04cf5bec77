"""frames.system: system-memory buffers as zero-copy views, checked pixel by pixel against the plane strides and
offsets GStreamer's own VideoInfo (or the buffer's video meta) gives for the caps."""
from __future__ import annotations

import gi
import numpy as np
import pytest

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import Gst, GstVideo

from inferstream.errors import UnsupportedFormatError
from inferstream.frames.system import as_frame_format, frame_format, mapped_frame

Gst.init(None)
W, H = 7, 5  # odd sizes: GStreamer pads rows to 4 bytes and rounds chroma planes up


def _info(fmt: str, extra: str = "") -> GstVideo.VideoInfo:
    return GstVideo.VideoInfo.new_from_caps(Gst.Caps.from_string(f"video/x-raw,format={fmt},width={W},height={H}{extra}"))


def _pattern(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


def _reference(data: bytes, offset: int, stride: int, rows: int, cols: int, channels: int) -> np.ndarray:
    """The plane read one byte at a time: row y, column x, channel c sits at offset + y * stride + x * channels + c."""
    return np.array([[[data[offset + y * stride + x * channels + c] for c in range(channels)] for x in range(cols)]
                     for y in range(rows)], np.uint8)


# format -> per plane (rows, cols, channels)
PLANES = {
    "RGB": [(H, W, 3)],
    "BGRx": [(H, W, 4)],
    "NV12": [(H, W, 1), ((H + 1) // 2, (W + 1) // 2, 2)],
    "I420": [(H, W, 1), ((H + 1) // 2, (W + 1) // 2, 1), ((H + 1) // 2, (W + 1) // 2, 1)],
}


@pytest.mark.parametrize("fmt", list(PLANES))
def test_planes_are_the_bytes_at_gstreamers_strides_and_offsets(fmt: str) -> None:
    info = _info(fmt)
    data = _pattern(info.size)
    buf = Gst.Buffer.new_wrapped(data)
    with mapped_frame(buf, info) as frame:
        assert (frame.format, frame.width, frame.height) == (fmt, W, H)
        assert len(frame.planes) == len(PLANES[fmt])
        for i, (plane, (rows, cols, ch)) in enumerate(zip(frame.planes, PLANES[fmt])):
            want = _reference(data, info.offset[i], info.stride[i], rows, cols, ch)
            got = plane.numpy() if plane.ndim == 3 else plane.numpy()[..., None]
            np.testing.assert_array_equal(got, want, err_msg=f"plane {i}")


def test_the_buffers_video_meta_wins_over_the_caps() -> None:
    """Upstream may pad rows and move planes: the GstVideoMeta's strides and offsets are the truth."""
    info = _info("RGB")
    stride, offset = 32, 16  # the caps say 24 and 0
    data = _pattern(offset + stride * H)
    buf = Gst.Buffer.new_wrapped(data)
    GstVideo.buffer_add_video_meta_full(buf, GstVideo.VideoFrameFlags.NONE, GstVideo.VideoFormat.RGB, W, H, 1,
                                        [offset, 0, 0, 0], [stride, 0, 0, 0])
    with mapped_frame(buf, info) as frame:
        np.testing.assert_array_equal(frame.planes[0].numpy(), _reference(data, offset, stride, H, W, 3))


def test_writable_views_draw_into_the_buffer() -> None:
    info = _info("RGB")
    buf = Gst.Buffer.new_wrapped(bytes(info.size))
    with mapped_frame(buf, info, writable=True) as frame:
        frame.planes[0][2, 3] = 200  # pixel (x=3, y=2), all three channels
    at = info.stride[0] * 2 + 3 * 3
    assert buf.extract_dup(at - 1, 5) == bytes([0, 200, 200, 200, 0])


@pytest.mark.parametrize(("extra", "expected"), [
    ("", ("bt601", False)),
    (",colorimetry=bt709", ("bt709", False)),
    (",colorimetry=1:4:0:0", ("bt601", True)),  # range 1 = 0..255, matrix 4 = BT.601 (what JPEG uses)
])
def test_colorimetry_is_read_from_the_caps(extra: str, expected: tuple[str, bool]) -> None:
    info = _info("NV12", extra)
    buf = Gst.Buffer.new_wrapped(bytes(info.size))
    with mapped_frame(buf, info) as frame:
        assert (frame.matrix, frame.full_range) == expected
    assert frame_format(info).colorimetry == expected


def test_frame_format_is_read_once_and_passed_through() -> None:
    info = _info("I420")
    fmt = frame_format(info)
    assert (fmt.name, fmt.width, fmt.height) == ("I420", W, H)
    assert fmt.strides == tuple(info.stride[:3]) and fmt.offsets == tuple(info.offset[:3])
    assert fmt.format_id == int(GstVideo.VideoFormat.I420)
    assert as_frame_format(fmt) is fmt and as_frame_format(info) == fmt


def test_an_unsupported_format_is_refused_by_name() -> None:
    info = _info("GRAY8")
    buf = Gst.Buffer.new_wrapped(bytes(info.size))
    refused = pytest.raises(UnsupportedFormatError, match=r"video format 'GRAY8' is not supported; use one of \['RGB'")
    with refused, mapped_frame(buf, info):
        pass
