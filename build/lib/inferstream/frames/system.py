"""System-memory video buffers as zero-copy tensor views (numpy view of the mapped buffer → torch, no host copy)."""
from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import gi
import numpy as np

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import Gst, GstVideo

from inferstream.errors import UnsupportedFormatError
from inferstream.rawframe import SUPPORTED_FORMATS, RawFrame, plane_specs


@dataclass(frozen=True, slots=True)
class FrameFormat:
    """What the caps say about every frame, read once per caps: each attribute read through GObject
    introspection costs microseconds, and mapping read a dozen of them per frame."""

    name: str
    width: int
    height: int
    strides: tuple[int, ...]
    offsets: tuple[int, ...]
    colorimetry: tuple[str, bool]
    format_id: int  # the GstVideoFormat value (CUDA memory checks its own layout against it)


def frame_format(info: GstVideo.VideoInfo) -> FrameFormat:
    n = info.finfo.n_planes
    return FrameFormat(info.finfo.name, info.width, info.height, tuple(info.stride[:n]), tuple(info.offset[:n]),
                       colorimetry_of(info), int(info.finfo.format))


def as_frame_format(info: GstVideo.VideoInfo | FrameFormat) -> FrameFormat:
    """``info`` as a FrameFormat: the mapping functions take either (elements keep the FrameFormat per caps)."""
    return info if isinstance(info, FrameFormat) else frame_format(info)


def _layout(buf: Gst.Buffer, fmt: FrameFormat) -> tuple[list[int], list[int]]:
    """Plane strides and offsets: the buffer's own video meta wins (upstream may pad rows), else the caps'."""
    vmeta = GstVideo.buffer_get_video_meta(buf)
    if vmeta is not None:
        n = len(fmt.strides)
        return list(vmeta.stride[:n]), list(vmeta.offset[:n])
    return list(fmt.strides), list(fmt.offsets)


@functools.cache
def _spend_readonly_warning() -> None:
    """Mapped READ memory is read-only, and torch warns (once per process) when viewing it; we never write through
    these views. The warning is spent here on a throwaway array, under a local filter, instead of a process-wide
    filter that would hide it from the user's own code too."""
    import torch

    readonly = np.zeros(1, np.uint8)
    readonly.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.from_numpy(readonly)


def _plane(data: memoryview, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    return np.ndarray(shape, np.uint8, buffer=data, offset=offset, strides=strides)


def frame_from_mapped(data: memoryview, fmt: str, width: int, height: int, strides: list[int],
                      offsets: list[int], colorimetry: tuple[str, bool] = ("bt601", False)) -> RawFrame:
    """Build a RawFrame of strided views over mapped bytes (no copy).

    Args:
        data: the mapped buffer bytes.
        fmt: GStreamer format name (one of SUPPORTED_FORMATS).
        width, height: frame size in pixels.
        strides, offsets: per-plane row stride and byte offset.
        colorimetry: (matrix name, full range) for YUV formats.
    """
    import torch

    if fmt not in SUPPORTED_FORMATS:
        raise UnsupportedFormatError(f"video format {fmt!r} is not supported; use one of {list(SUPPORTED_FORMATS)}")
    _spend_readonly_warning()
    planes = [_plane(data, offsets[i], shape, (strides[i], *inner))
              for i, (shape, inner) in enumerate(plane_specs(fmt, width, height))]
    return RawFrame(fmt, width, height, tuple(torch.from_numpy(p) for p in planes), colorimetry[0], colorimetry[1])


def colorimetry_of(info: GstVideo.VideoInfo) -> tuple[str, bool]:
    """(matrix, full_range) of the caps, as ops.color expects them."""
    matrix = "bt709" if info.colorimetry.matrix == GstVideo.VideoColorMatrix.BT709 else "bt601"
    return matrix, info.colorimetry.range == getattr(GstVideo.VideoColorRange, "0_255")


@contextmanager
def mapped_frame(buf: Gst.Buffer, info: GstVideo.VideoInfo | FrameFormat, writable: bool = False) -> Iterator[RawFrame]:
    """Zero-copy RawFrame of a system-memory buffer; valid only inside the with-block (R10).

    ``info``: the caps' VideoInfo, or its ``frame_format`` (kept per caps by elements that map every frame).
    ``writable`` maps READ|WRITE (the buffer must be writable, as in ``do_transform_ip``) so the views can be drawn on.
    """
    fmt = as_frame_format(info)
    strides, offsets = _layout(buf, fmt)
    flags = Gst.MapFlags.READ | Gst.MapFlags.WRITE if writable else Gst.MapFlags.READ
    with buf.map(flags) as mapinfo:
        yield frame_from_mapped(mapinfo.data, fmt.name, fmt.width, fmt.height, strides, offsets, fmt.colorimetry)
