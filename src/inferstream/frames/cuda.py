"""CUDA-memory video buffers (``video/x-raw(memory:CUDAMemory)``) as zero-copy torch CUDA tensors.

Two jobs, both at the GStreamer edge:

1. ``mapped_cuda_frames(buf, info)``: map the buffer's ``GstCudaMemory`` with ``GST_MAP_READ | GST_MAP_CUDA``
   (through ctypes: gst-python's ``Buffer.map`` drops the CUDA flag) and hand out a ``RawFrame`` whose planes are
   ``torch.uint8`` CUDA tensors viewing the device memory with its pitch (no copy), built from
   ``__cuda_array_interface__`` dicts. Strides and offsets come from the memory's own ``GstVideoInfo``.
2. Context sharing: GStreamer's CUDA elements create their own ``CUcontext`` unless the application hands them
   one. Memory of another context cannot be read by torch's kernels, so the pipeline must use torch's primary
   context: ``share_torch_context(pipeline | bus | element)``, or the building blocks ``torch_gst_context``,
   ``answer_need_context`` (bus sync handler), ``answer_context_query`` / ``check_gst_context`` (an element's
   query / ``do_set_context`` path). A frame from another context raises ``CudaContextMismatchError``.

Synchronisation (GStreamer ≥ 1.24 does not synchronise a ``GST_MAP_CUDA`` map):

Both are one ``cuEventRecord`` + ``cuStreamWaitEvent`` pair through ctypes that keeps the GIL (``gstnative``): torch's
``Event.record`` / ``wait_event`` release it, and under many streaming threads each re-acquisition can cost
milliseconds.

- on entry, torch's current stream waits (an event, no host block) for the work GStreamer queued on the
  memory's CUDA stream (``gst_cuda_memory_get_stream`` → ``gst_cuda_stream_get_handle``; the default stream
  when it has none);
- on exit, the memory's stream waits for torch's current stream as it was on entry, so GStreamer does not
  reuse or overwrite the memory while kernels that read it are still queued.

So the caller must enqueue every kernel that reads the planes on ``torch.cuda.current_stream()`` (the default),
or make that stream wait for its other streams (``current.wait_stream(other)``) before the block ends. Nothing
that aliases the planes may outlive the block: copy (``.clone()``, a letterbox, ...) inside it.

Nothing here imports torch or gi at module import; the pure parts (plane layout maths, the
``__cuda_array_interface__`` dicts, the C struct layouts) are tested on CPU in ``tests/frames/test_cuda_pure.py``.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from inferstream.errors import ConfigError, UnsupportedFormatError
from inferstream.frames.raw import PACKED_FORMATS, PLANAR_FORMATS, RawFrame
from inferstream.gstnative import bind, buffer_address, cdll, pydll

if TYPE_CHECKING:
    from gi.repository import Gst, GstCuda, GstVideo

GST_MAP_READ: Final = 1 << 0
GST_MAP_CUDA: Final = 1 << 17  # GST_MAP_FLAG_LAST << 1 (gst/cuda/gstcudamemory.h): 0x20000
CUDA_CONTEXT_TYPE: Final = "gst.cuda.context"  # GST_CUDA_CONTEXT_TYPE
SUPPORTED_FORMATS: Final[tuple[str, ...]] = PACKED_FORMATS + PLANAR_FORMATS
_CHANNELS: Final = {f: 3 if len(f) == 3 else 4 for f in PACKED_FORMATS}
_N_PLANES: Final = {"NV12": 2, "I420": 3} | {f: 1 for f in PACKED_FORMATS}


class CudaContextMismatchError(ConfigError):
    """A CUDA buffer lives in a CUDA context other than torch's: the pipeline was not given torch's context."""


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
    if fmt not in _N_PLANES:
        raise UnsupportedFormatError(f"video format {fmt!r} is not supported on CUDA memory; use one of "
                                     f"{list(SUPPORTED_FORMATS)}")
    if width <= 0 or height <= 0:
        raise ValueError(f"frame size: expected positive width and height, got {width}x{height}")
    n = _N_PLANES[fmt]
    if len(strides) < n or len(offsets) < n:
        raise ValueError(f"{fmt}: expected {n} strides and offsets, got {len(strides)} and {len(offsets)}")
    ch, cw = (height + 1) // 2, (width + 1) // 2
    specs: list[tuple[tuple[int, ...], tuple[int, ...]]]
    if fmt in _CHANNELS:
        c = _CHANNELS[fmt]
        specs = [((height, width, c), (c, 1))]
    elif fmt == "NV12":
        specs = [((height, width), (1,)), ((ch, cw, 2), (2, 1))]
    else:  # I420
        specs = [((height, width), (1,)), ((ch, cw), (1,)), ((ch, cw), (1,))]
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
        ``stream`` is ``None`` because ``mapped_cuda_frames`` orders the streams itself.

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


def mismatch_message(memory_ctx: int, torch_ctx: int, device: int) -> str:
    """The text of ``CudaContextMismatchError``: what is wrong and what to do."""
    return (f"CUDA buffer belongs to CUDA context {memory_ctx:#x}, not torch's primary context {torch_ctx:#x} on "
            f"cuda:{device}: torch kernels cannot read another context's memory. GStreamer's CUDA elements "
            f"(nvh264dec, cudaupload, cudaconvert, ...) create their own context unless the application shares "
            f"one: call inferstream.frames.cuda.share_torch_context(pipeline) before the pipeline leaves NULL, or "
            f"answer NEED_CONTEXT '{CUDA_CONTEXT_TYPE}' messages with answer_need_context() in a bus sync handler.")


# ---------------------------------------------------------------------------------------------------------------
# C structs read through ctypes (layouts of GStreamer 1.28, x86_64; pinned by tests/frames/test_cuda_pure.py)
# ---------------------------------------------------------------------------------------------------------------
class GstMapInfoC(ctypes.Structure):
    """``GstMapInfo`` (gst/gstmemory.h)."""

    _fields_ = [("memory", ctypes.c_void_p), ("flags", ctypes.c_int), ("data", ctypes.c_void_p),
                ("size", ctypes.c_size_t), ("maxsize", ctypes.c_size_t), ("user_data", ctypes.c_void_p * 4),
                ("_gst_reserved", ctypes.c_void_p * 4)]


class _GstMiniObjectC(ctypes.Structure):
    _fields_ = [("type", ctypes.c_size_t), ("refcount", ctypes.c_int), ("lockstate", ctypes.c_int),
                ("flags", ctypes.c_uint), ("copy", ctypes.c_void_p), ("dispose", ctypes.c_void_p),
                ("free", ctypes.c_void_p), ("priv_uint", ctypes.c_uint), ("priv_pointer", ctypes.c_void_p)]


class _GstMemoryC(ctypes.Structure):
    _fields_ = [("mini_object", _GstMiniObjectC), ("allocator", ctypes.c_void_p), ("parent", ctypes.c_void_p),
                ("maxsize", ctypes.c_size_t), ("align", ctypes.c_size_t), ("offset", ctypes.c_size_t),
                ("size", ctypes.c_size_t)]


class GstVideoInfoC(ctypes.Structure):
    """``GstVideoInfo`` (gst/video/video-info.h); ``finfo`` points at a ``GstVideoFormatInfo`` whose first field is
    the ``GstVideoFormat``."""

    _fields_ = [("finfo", ctypes.c_void_p), ("interlace_mode", ctypes.c_int), ("flags", ctypes.c_int),
                ("width", ctypes.c_int), ("height", ctypes.c_int), ("size", ctypes.c_size_t),
                ("views", ctypes.c_int), ("chroma_site", ctypes.c_int), ("colorimetry", ctypes.c_int * 4),
                ("par_n", ctypes.c_int), ("par_d", ctypes.c_int), ("fps_n", ctypes.c_int), ("fps_d", ctypes.c_int),
                ("offset", ctypes.c_size_t * 4), ("stride", ctypes.c_int * 4), ("_abi", ctypes.c_void_p * 4)]


class GstCudaMemoryC(ctypes.Structure):
    """``GstCudaMemory`` (gst/cuda/gstcudamemory.h): the memory, its ``GstCudaContext*`` and its video info."""

    _fields_ = [("mem", _GstMemoryC), ("context", ctypes.c_void_p), ("info", GstVideoInfoC),
                ("priv", ctypes.c_void_p), ("_gst_reserved", ctypes.c_void_p * 4)]


# ---------------------------------------------------------------------------------------------------------------
# Native entry points (loaded on first use; gi has already loaded the same libraries by soname)
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Native:
    gst: ctypes.CDLL
    cuda_gst: ctypes.CDLL


@functools.cache
def _native() -> _Native:
    """Per-frame calls, bound to keep the GIL (``gstnative``): none of them waits on the GPU."""
    gst, cg = pydll("libgstreamer-1.0.so.0"), pydll("libgstcuda-1.0.so.0")
    vp, i = ctypes.c_void_p, ctypes.c_int
    bind(gst, [("gst_buffer_n_memory", ctypes.c_uint, (vp,)), ("gst_buffer_peek_memory", vp, (vp, ctypes.c_uint)),
               ("gst_memory_map", i, (vp, ctypes.POINTER(GstMapInfoC), i)),
               ("gst_memory_unmap", None, (vp, ctypes.POINTER(GstMapInfoC)))])
    bind(cg, [("gst_is_cuda_memory", i, (vp,)), ("gst_cuda_memory_get_stream", vp, (vp,)),
              ("gst_cuda_stream_get_handle", vp, (vp,)), ("gst_cuda_context_get_handle", vp, (vp,))])
    return _Native(gst, cg)


@functools.cache
def _libcuda() -> ctypes.CDLL:
    cu = cdll("libcuda.so.1")
    vp, i = ctypes.c_void_p, ctypes.c_int
    bind(cu, [("cuInit", i, (ctypes.c_uint,)), ("cuDeviceGet", i, (ctypes.POINTER(i), i)),
              ("cuDevicePrimaryCtxRetain", i, (ctypes.POINTER(vp), i))])
    return cu


def _check_cu(result: int, call: str) -> None:
    if result != 0:
        raise RuntimeError(f"{call} failed: CUresult {result}")


def _address(value: Any) -> int:
    """A C pointer as int, whether it came back as an int, None or a PyCapsule (GI ``gpointer`` returns)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return int(get(value, None) or 0)


def _device_index(device: int | None) -> int:
    import torch

    return torch.cuda.current_device() if device is None else int(device)


# ---------------------------------------------------------------------------------------------------------------
# Context sharing
# ---------------------------------------------------------------------------------------------------------------
@functools.cache
def torch_context_handle(device: int) -> int:
    """torch's primary ``CUcontext`` on ``device`` (retained once for the life of the process).

    Args:
        device: CUDA device ordinal as torch numbers it.

    Returns:
        The ``CUcontext`` address.
    """
    import torch

    torch.cuda.init()
    cu = _libcuda()
    _check_cu(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    _check_cu(cu.cuDeviceGet(ctypes.byref(dev), device), f"cuDeviceGet({device})")
    _check_cu(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
    if not ctx.value:
        raise RuntimeError(f"cuDevicePrimaryCtxRetain returned no context for cuda:{device}")
    return int(ctx.value)


_CONTEXTS: dict[int, tuple[GstCuda.CudaContext, Gst.Context]] = {}
_CONTEXTS_LOCK = threading.Lock()


def _gst_cuda() -> Any:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstCuda", "1.0")
    from gi.repository import GstCuda

    return GstCuda


def torch_gst_context(device: int | None = None) -> Gst.Context:
    """The ``gst.cuda.context`` ``Gst.Context`` wrapping torch's primary context (one per device, cached).

    Every element given it shares one ``GstCudaContext`` object, so buffers flow between them without copies and
    torch can read them.

    Args:
        device: CUDA ordinal; ``None`` = ``torch.cuda.current_device()``.

    Raises:
        RuntimeError: GStreamer cannot load libcuda, or wrapping the context fails.
    """
    dev = _device_index(device)
    with _CONTEXTS_LOCK:
        if dev not in _CONTEXTS:
            gst_cuda = _gst_cuda()
            if not gst_cuda.cuda_load_library():
                raise RuntimeError("GstCuda could not load libcuda.so.1 (no NVIDIA driver?)")
            cuda_ctx = gst_cuda.CudaContext.new_wrapped(torch_context_handle(dev), dev)
            if cuda_ctx is None:
                raise RuntimeError(f"gst_cuda_context_new_wrapped failed for torch's context on cuda:{dev}")
            _CONTEXTS[dev] = (cuda_ctx, gst_cuda.context_new_cuda_context(cuda_ctx))
        return _CONTEXTS[dev][1]


def answer_need_context(message: Gst.Message, device: int | None = None) -> bool:
    """Answer a ``NEED_CONTEXT`` message for ``gst.cuda.context`` by giving its source torch's context.

    Call it from a bus *sync* handler (the element waits for the answer on its own thread).

    Returns:
        True when the message was such a request and has been answered; False for any other message.
    """
    from gi.repository import Gst

    if message.type != Gst.MessageType.NEED_CONTEXT:
        return False
    ok, ctx_type = message.parse_context_type()
    if not ok or ctx_type != CUDA_CONTEXT_TYPE or not isinstance(message.src, Gst.Element):
        return False
    message.src.set_context(torch_gst_context(device))
    return True


def need_context_sync_handler(device: int | None = None) -> Callable[[Gst.Bus, Gst.Message], Gst.BusSyncReply]:
    """A bus sync handler that answers CUDA ``NEED_CONTEXT`` requests and passes every message on."""
    from gi.repository import Gst

    def handler(_bus: Gst.Bus, message: Gst.Message) -> Gst.BusSyncReply:
        answer_need_context(message, device)
        return Gst.BusSyncReply.PASS

    return handler


def answer_context_query(element: Gst.Element, query: Gst.Query, device: int | None = None) -> bool:
    """For an element's ``do_query``: answer a ``CONTEXT`` query for ``gst.cuda.context`` with torch's context.

    Returns:
        True when answered (return True from ``do_query``), False when the query is something else.
    """
    from gi.repository import Gst

    if query.type != Gst.QueryType.CONTEXT:
        return False
    ok, ctx_type = query.parse_context_type()
    if not ok or ctx_type != CUDA_CONTEXT_TYPE:
        return False
    dev = _device_index(device)
    torch_gst_context(dev)
    return bool(_gst_cuda().cuda_handle_context_query(element, query, _CONTEXTS[dev][0]))


def check_gst_context(context: Gst.Context, device: int | None = None) -> bool:
    """For an element's ``do_set_context``: check that a ``gst.cuda.context`` it is given is torch's.

    Returns:
        True for a CUDA context wrapping torch's primary context, False for a context of another type.

    Raises:
        CudaContextMismatchError: a CUDA context other than torch's (the element would produce memory that torch
            kernels cannot read).
    """
    if context.get_context_type() != CUDA_CONTEXT_TYPE:
        return False
    dev = _device_index(device)
    cuda_ctx = context.get_structure().get_value(CUDA_CONTEXT_TYPE)
    handle = _address(cuda_ctx.get_handle()) if cuda_ctx is not None else 0
    if handle != torch_context_handle(dev):
        raise CudaContextMismatchError(mismatch_message(handle, torch_context_handle(dev), dev))
    return True


def share_torch_context(target: Gst.Element | Gst.Bus, device: int | None = None) -> Gst.Context:
    """Make GStreamer's CUDA elements use torch's primary context.

    - a ``Gst.Bin`` / ``Gst.Pipeline`` or any element: ``set_context`` (a bin passes it to its children, also to
      those added later); call before the pipeline leaves NULL.
    - a ``Gst.Bus``: installs ``need_context_sync_handler`` as its sync handler (this replaces any other sync
      handler; compose with ``answer_need_context`` to keep your own).

    Returns:
        The ``Gst.Context`` handed out.
    """
    from gi.repository import Gst

    ctx = torch_gst_context(device)
    if isinstance(target, Gst.Bus):
        target.set_sync_handler(need_context_sync_handler(device))
    elif isinstance(target, Gst.Element):
        target.set_context(ctx)
    else:
        raise TypeError(f"target: expected a Gst.Element (pipeline, bin, element) or Gst.Bus, got {type(target)}")
    return ctx


# ---------------------------------------------------------------------------------------------------------------
# Mapping
# ---------------------------------------------------------------------------------------------------------------
def _cuda_memory(buf: Gst.Buffer) -> int:
    nat = _native()
    addr = buffer_address(buf)
    n = nat.gst.gst_buffer_n_memory(addr)
    if n != 1:
        raise UnsupportedFormatError(f"CUDA buffer: expected 1 memory holding every plane, got {n}")
    mem = nat.gst.gst_buffer_peek_memory(addr, 0)
    if not mem or not nat.cuda_gst.gst_is_cuda_memory(mem):
        raise UnsupportedFormatError("buffer memory is not GstCudaMemory (caps lack memory:CUDAMemory?): "
                                     "map system memory with inferstream.frames.system.mapped_frame")
    return int(mem)


def _memory_layout(cmem: GstCudaMemoryC, info: GstVideo.VideoInfo) -> tuple[list[int], list[int]]:
    """Strides/offsets of the memory's own video info (the pitch the allocator chose), checked against the caps."""
    minfo = cmem.info
    fmt_id = ctypes.c_int.from_address(minfo.finfo).value if minfo.finfo else -1
    if fmt_id != int(info.finfo.format) or minfo.width < info.width or minfo.height < info.height:
        raise UnsupportedFormatError(
            f"CUDA memory layout (format id {fmt_id}, {minfo.width}x{minfo.height}) does not match the caps "
            f"({info.finfo.name} = {int(info.finfo.format)}, {info.width}x{info.height})")
    n = _N_PLANES.get(info.finfo.name, 1)
    return list(minfo.stride[:n]), list(minfo.offset[:n])


def _gst_stream_handle(mem: int) -> int:
    """The ``CUstream`` GStreamer queues the memory's work on (0: the legacy default stream)."""
    nat = _native()
    return int(nat.cuda_gst.gst_cuda_stream_get_handle(nat.cuda_gst.gst_cuda_memory_get_stream(mem)) or 0)


@functools.cache
def _cu_sync() -> ctypes.PyDLL:
    cu = pydll("libcuda.so.1")
    vp, i, u = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
    bind(cu, [("cuEventCreate", i, (ctypes.POINTER(vp), u)), ("cuEventRecord", i, (vp, vp)),
              ("cuStreamWaitEvent", i, (vp, vp, u)), ("cuCtxGetCurrent", i, (ctypes.POINTER(vp),)),
              ("cuCtxSetCurrent", i, (vp,))])
    return cu


_THREAD = threading.local()
_CU_EVENT_DISABLE_TIMING: Final = 0x2


def stream_wait(waiter: int, signaller: int, context: int) -> None:
    """Make CUDA stream ``waiter`` wait (on the device, the host does not block) for the work queued so far on
    ``signaller``; both ``CUstream`` handles of ``context``, 0 = the legacy default stream.

    One event per thread, re-recorded each time: a wait already enqueued keeps the state the event had then.
    """
    cu = _cu_sync()
    event = getattr(_THREAD, "events", {}).get(context)
    if event is None:
        current = ctypes.c_void_p()
        _check_cu(cu.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        if current.value != context:
            _check_cu(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        created = ctypes.c_void_p()
        _check_cu(cu.cuEventCreate(ctypes.byref(created), _CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        event = created.value
        _THREAD.events = {**getattr(_THREAD, "events", {}), context: event}
    _check_cu(cu.cuEventRecord(event, signaller), "cuEventRecord")
    _check_cu(cu.cuStreamWaitEvent(waiter, event, 0), "cuStreamWaitEvent")


@contextmanager
def mapped_cuda_frames(buf: Gst.Buffer, info: GstVideo.VideoInfo, *, device: int | None = None) -> Iterator[RawFrame]:
    """Zero-copy ``RawFrame`` of a CUDA-memory buffer; valid only inside the with-block (R10).

    Args:
        buf: a buffer of ``video/x-raw(memory:CUDAMemory)`` holding one ``GstCudaMemory``.
        info: the caps' video info (format, size, colorimetry).
        device: torch CUDA ordinal the pipeline's context lives on; ``None`` = current device.

    Yields:
        RawFrame whose planes are uint8 CUDA tensors with the memory's pitch (see ``RawFrame``), ready on
        ``torch.cuda.current_stream()``. Enqueue all work reading them on that stream (or make it wait for your
        other streams) before the block ends: on exit GStreamer's stream waits for it, then the memory is unmapped.

    Raises:
        UnsupportedFormatError: not CUDA memory, several memories, an unsupported format or a layout that does
            not match the caps.
        CudaContextMismatchError: the memory is not in torch's context (see ``share_torch_context``).
        RuntimeError: ``gst_memory_map`` failed.
    """
    import torch

    from inferstream.frames.system import colorimetry_of

    fmt = info.finfo.name
    if fmt not in _N_PLANES:
        raise UnsupportedFormatError(f"video format {fmt!r} is not supported on CUDA memory; use one of "
                                     f"{list(SUPPORTED_FORMATS)}")
    mem = _cuda_memory(buf)
    cmem = GstCudaMemoryC.from_address(mem)
    dev = torch.device("cuda", _device_index(device))
    mem_ctx = _address(_native().cuda_gst.gst_cuda_context_get_handle(cmem.context)) if cmem.context else 0
    if mem_ctx != torch_context_handle(dev.index):
        raise CudaContextMismatchError(mismatch_message(mem_ctx, torch_context_handle(dev.index), dev.index))
    strides, offsets = _memory_layout(cmem, info)
    layouts = plane_layouts(fmt, info.width, info.height, strides, offsets)
    mapinfo = GstMapInfoC()
    if not _native().gst.gst_memory_map(mem, ctypes.byref(mapinfo), GST_MAP_READ | GST_MAP_CUDA):
        raise RuntimeError("gst_memory_map(GST_MAP_READ | GST_MAP_CUDA) failed")
    try:
        if frame_nbytes(layouts) > mapinfo.size:
            raise UnsupportedFormatError(f"{fmt} {info.width}x{info.height}: planes need {frame_nbytes(layouts)} "
                                         f"bytes, the CUDA memory holds {mapinfo.size}")
        gst_stream = _gst_stream_handle(mem)
        consumer = torch.cuda.current_stream(dev).cuda_stream
        context = torch_context_handle(dev.index)
        stream_wait(consumer, gst_stream, context)
        planes = tuple(torch.as_tensor(CudaArrayView(cuda_array_interface(mapinfo.data, p)), device=dev)
                       for p in layouts)
        try:
            yield RawFrame(fmt, info.width, info.height, planes, *colorimetry_of(info))
        finally:
            stream_wait(gst_stream, consumer, context)
    finally:
        _native().gst.gst_memory_unmap(mem, ctypes.byref(mapinfo))
