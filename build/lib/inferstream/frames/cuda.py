"""CUDA-memory video buffers (``video/x-raw(memory:CUDAMemory)``) as zero-copy torch CUDA tensors.

``mapped_cuda_frame(buf, info)`` maps the buffer's ``GstCudaMemory`` with ``GST_MAP_READ | GST_MAP_CUDA``
(through ctypes: gst-python's ``Buffer.map`` drops the CUDA flag) and hands out a ``RawFrame`` whose planes are
``torch.uint8`` CUDA tensors viewing the device memory with its pitch (no copy), built from
``__cuda_array_interface__`` dicts. Strides and offsets come from the memory's own ``GstVideoInfo``. Context
sharing (torch's primary context for GStreamer's CUDA elements) lives in ``frames.cuda_context``.

Synchronisation (GStreamer ≥ 1.24 does not synchronise a ``GST_MAP_CUDA`` map):

- on entry, torch's current stream waits (an event, no host block) for the work GStreamer queued on the
  memory's CUDA stream (``gst_cuda_memory_get_stream`` → ``gst_cuda_stream_get_handle``; the default stream
  when it has none);
- on exit, the memory's stream waits for torch's current stream as it was on entry, so GStreamer does not
  reuse or overwrite the memory while kernels that read it are still queued.

Both are one ``cuEventRecord`` + ``cuStreamWaitEvent`` pair through ctypes that keeps the GIL (``native.cuda``):
torch's ``Event.record`` / ``wait_event`` release it, and under many streaming threads each re-acquisition can
cost milliseconds.

So the caller must enqueue every kernel that reads the planes on ``torch.cuda.current_stream()`` (the default),
or make that stream wait for its other streams (``current.wait_stream(other)``) before the block ends. Nothing
that aliases the planes may outlive the block: copy (``.clone()``, a letterbox, ...) inside it.

Nothing here imports torch or gi at module import; the pure parts (plane layout maths, the
``__cuda_array_interface__`` dicts) are tested on CPU in ``tests/frames/test_cuda_pure.py``, the C struct layouts
(``native.structs``) in ``tests/native/test_structs.py``.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferstream.errors import UnsupportedFormatError
from inferstream.frames.cuda_context import (
    CudaContextMismatchError,
    device_index,
    mismatch_message,
    torch_context_handle,
)
from inferstream.native.cuda import GST_MAP_CUDA, GST_MAP_READ, gst_cuda_calls, stream_wait
from inferstream.native.gst import buffer_address, c_address
from inferstream.native.structs import GstCudaMemoryC, GstMapInfoC
from inferstream.rawframe import SUPPORTED_FORMATS, RawFrame, plane_specs

if TYPE_CHECKING:
    import torch
    from gi.repository import Gst, GstVideo

    from inferstream.frames.system import FrameFormat



# ---------------------------------------------------------------------------------------------------------------
# Pure parts: plane layout maths and __cuda_array_interface__ (no torch, no gi, no CUDA)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PlaneLayout:
    """One plane inside a mapped frame, in bytes (elements are uint8).

    Attributes:
        offset: byte offset of the plane's first pixel from the start of the mapping.
        shape: ``(H, W)``, ``(H, W, C)`` or, for NV12's chroma, ``(ceil(H/2), ceil(W/2), 2)``.
        strides: byte strides per dimension, e.g. ``(pitch, C, 1)``.
    """

    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def end(self) -> int:
        """One past the last byte the plane touches (0 for an empty plane)."""
        if any(s == 0 for s in self.shape):
            return self.offset
        return self.offset + sum((n - 1) * st for n, st in zip(self.shape, self.strides)) + 1


def plane_layouts(fmt: str, width: int, height: int, strides: list[int] | tuple[int, ...],
                  offsets: list[int] | tuple[int, ...]) -> tuple[PlaneLayout, ...]:
    """Plane views of a frame as ``RawFrame`` describes them, from per-plane pitches and offsets.

    Args:
        fmt: GStreamer format name, one of ``SUPPORTED_FORMATS``.
        width, height: frame size in pixels (> 0).
        strides: per-plane row pitch in bytes (at least as many as the format has planes).
        offsets: per-plane byte offset from the start of the mapping.

    Returns:
        One ``PlaneLayout`` per plane: packed ``(H, W, C)``; NV12 ``Y (H, W)`` + ``UV (ceil(H/2), ceil(W/2), 2)``;
        I420 ``Y (H, W)``, ``U``, ``V (ceil(H/2), ceil(W/2))``.

    Raises:
        UnsupportedFormatError: ``fmt`` is not supported.
        ValueError: non-positive size, too few strides/offsets, a negative offset, or a pitch shorter than a row.
    """
    if fmt not in SUPPORTED_FORMATS:
        raise UnsupportedFormatError(f"video format {fmt!r} is not supported on CUDA memory; use one of "
                                     f"{list(SUPPORTED_FORMATS)}")
    if width <= 0 or height <= 0:
        raise ValueError(f"frame size: expected positive width and height, got {width}x{height}")
    specs = plane_specs(fmt, width, height)
    n = len(specs)
    if len(strides) < n or len(offsets) < n:
        raise ValueError(f"{fmt}: expected {n} strides and offsets, got {len(strides)} and {len(offsets)}")
    layouts = []
    for i, (shape, inner) in enumerate(specs):
        row_bytes = shape[1] * inner[0]
        if strides[i] < row_bytes:
            raise ValueError(f"{fmt} plane {i}: expected a pitch >= {row_bytes} bytes, got {strides[i]}")
        if offsets[i] < 0:
            raise ValueError(f"{fmt} plane {i}: expected a non-negative offset, got {offsets[i]}")
        layouts.append(PlaneLayout(int(offsets[i]), shape, (int(strides[i]), *inner)))
    return tuple(layouts)


def frame_nbytes(layouts: tuple[PlaneLayout, ...]) -> int:
    """Bytes a mapping must hold for every plane view to stay inside it."""
    return max(p.end for p in layouts)


def cuda_array_interface(ptr: int, layout: PlaneLayout, *, readonly: bool = False) -> dict[str, Any]:
    """``__cuda_array_interface__`` (version 3) dict of one uint8 plane at device address ``ptr + offset``.

    Args:
        ptr: device address of the mapping (``CUdeviceptr``), non-zero.
        layout: the plane inside it.
        readonly: the CAI read-only flag. torch refuses ``True`` ("the read only flag is not supported"), so
            the views are writable by construction: never write through them (the map is ``GST_MAP_READ``).

    Returns:
        ``{"shape", "typestr": "|u1", "data": (address, readonly), "strides", "version": 3, "stream": None}``;
        ``stream`` is ``None`` because ``mapped_cuda_frame`` orders the streams itself.

    Raises:
        ValueError: a null pointer.
    """
    if not ptr:
        raise ValueError("ptr: expected a device address, got NULL")
    return {"shape": layout.shape, "typestr": "|u1", "data": (ptr + layout.offset, readonly),
            "strides": layout.strides, "version": 3, "stream": None}


class CudaArrayView:
    """A bare object exposing one ``__cuda_array_interface__`` dict, for ``torch.as_tensor(view, device=...)``."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, interface: dict[str, Any]) -> None:
        self.__cuda_array_interface__ = interface


# ---------------------------------------------------------------------------------------------------------------
# Mapping
# ---------------------------------------------------------------------------------------------------------------
def _cuda_memory(buf: Gst.Buffer) -> int:
    nat = gst_cuda_calls()
    addr = buffer_address(buf)
    n = nat.gst.gst_buffer_n_memory(addr)
    if n != 1:
        raise UnsupportedFormatError(f"CUDA buffer: expected 1 memory holding every plane, got {n}")
    mem = nat.gst.gst_buffer_peek_memory(addr, 0)
    if not mem or not nat.cuda_gst.gst_is_cuda_memory(mem):
        raise UnsupportedFormatError("buffer memory is not GstCudaMemory (caps lack memory:CUDAMemory?): "
                                     "map system memory with inferstream.frames.system.mapped_frame")
    return int(mem)


def _memory_layout(cmem: GstCudaMemoryC, fmt: FrameFormat) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Strides/offsets of the memory's own video info (the pitch the allocator chose), checked against the caps."""
    minfo = cmem.info
    fmt_id = ctypes.c_int.from_address(minfo.finfo).value if minfo.finfo else -1
    if fmt_id != fmt.format_id or minfo.width < fmt.width or minfo.height < fmt.height:
        raise UnsupportedFormatError(
            f"CUDA memory layout (format id {fmt_id}, {minfo.width}x{minfo.height}) does not match the caps "
            f"({fmt.name} = {fmt.format_id}, {fmt.width}x{fmt.height})")
    n = len(fmt.strides)  # the caps' plane count
    return tuple(minfo.stride[:n]), tuple(minfo.offset[:n])


@functools.cache
def _cuda_device(index: int) -> torch.device:
    import torch

    return torch.device("cuda", index)


def _current_stream_handle(index: int) -> int:
    """torch's current ``CUstream`` on device ``index``: the raw handle torch's generated code reads, without the
    ``torch.cuda.Stream`` object ``current_stream`` builds each call (a few percent of a frame's mapping)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return int(raw(index)) if raw is not None else int(torch.cuda.current_stream(index).cuda_stream)


@functools.lru_cache(maxsize=64)
def _layouts(fmt: str, width: int, height: int, strides: tuple[int, ...],
             offsets: tuple[int, ...]) -> tuple[tuple[PlaneLayout, ...], int]:
    """``plane_layouts`` and ``frame_nbytes``, worked out once per layout: a decoder's pool hands out one or two,
    and building them took a tenth of a frame's mapping."""
    layouts = plane_layouts(fmt, width, height, strides, offsets)
    return layouts, frame_nbytes(layouts)


def _gst_stream_handle(mem: int) -> int:
    """The ``CUstream`` GStreamer queues the memory's work on (0: the legacy default stream)."""
    nat = gst_cuda_calls()
    return int(nat.cuda_gst.gst_cuda_stream_get_handle(nat.cuda_gst.gst_cuda_memory_get_stream(mem)) or 0)


@contextmanager
def mapped_cuda_frame(buf: Gst.Buffer, info: GstVideo.VideoInfo | FrameFormat, *,
                       device: int | None = None) -> Iterator[RawFrame]:
    """Zero-copy ``RawFrame`` of a CUDA-memory buffer; valid only inside the with-block (R10).

    Args:
        buf: a buffer of ``video/x-raw(memory:CUDAMemory)`` holding one ``GstCudaMemory``.
        info: the caps' video info (format, size, colorimetry), or its ``FrameFormat`` (read once per caps:
            reading the VideoInfo through GObject introspection costs tens of microseconds per frame).
        device: torch CUDA ordinal the pipeline's context lives on; ``None`` = current device.

    Yields:
        RawFrame whose planes are uint8 CUDA tensors with the memory's pitch (see ``RawFrame``), ready on
        ``torch.cuda.current_stream()``. Enqueue all work reading them on that stream (or make it wait for your
        other streams) before the block ends: on exit GStreamer's stream waits for it, then the memory is unmapped.

    Raises:
        UnsupportedFormatError: not CUDA memory, several memories, an unsupported format or a layout that does
            not match the caps.
        CudaContextMismatchError: the memory is not in torch's context (see
            ``frames.cuda_context.share_torch_context``).
        RuntimeError: ``gst_memory_map`` failed.
    """
    import torch

    from inferstream.frames.system import as_frame_format

    ff = as_frame_format(info)
    fmt = ff.name
    if fmt not in SUPPORTED_FORMATS:
        raise UnsupportedFormatError(f"video format {fmt!r} is not supported on CUDA memory; use one of "
                                     f"{list(SUPPORTED_FORMATS)}")
    mem = _cuda_memory(buf)
    cmem = GstCudaMemoryC.from_address(mem)
    dev = _cuda_device(device_index(device))
    mem_ctx = c_address(gst_cuda_calls().cuda_gst.gst_cuda_context_get_handle(cmem.context)) if cmem.context else 0
    if mem_ctx != torch_context_handle(dev.index):
        raise CudaContextMismatchError(mismatch_message(mem_ctx, torch_context_handle(dev.index), dev.index))
    strides, offsets = _memory_layout(cmem, ff)
    layouts, nbytes = _layouts(fmt, ff.width, ff.height, strides, offsets)
    mapinfo = GstMapInfoC()
    if not gst_cuda_calls().gst.gst_memory_map(mem, ctypes.byref(mapinfo), GST_MAP_READ | GST_MAP_CUDA):
        raise RuntimeError("gst_memory_map(GST_MAP_READ | GST_MAP_CUDA) failed")
    try:
        if nbytes > mapinfo.size:
            raise UnsupportedFormatError(f"{fmt} {ff.width}x{ff.height}: planes need {nbytes} "
                                         f"bytes, the CUDA memory holds {mapinfo.size}")
        gst_stream = _gst_stream_handle(mem)
        consumer = _current_stream_handle(dev.index)
        context = torch_context_handle(dev.index)
        stream_wait(consumer, gst_stream, context)
        planes = tuple(torch.as_tensor(CudaArrayView(cuda_array_interface(mapinfo.data, p)), device=dev)
                       for p in layouts)
        try:
            yield RawFrame(fmt, ff.width, ff.height, planes, *ff.colorimetry)
        finally:
            stream_wait(gst_stream, consumer, context)
    finally:
        gst_cuda_calls().gst.gst_memory_unmap(mem, ctypes.byref(mapinfo))
