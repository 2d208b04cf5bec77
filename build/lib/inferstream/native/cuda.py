"""The CUDA driver (libcuda) and GStreamer's CUDA library (libgstcuda) through ctypes: one binding of each, one error
check.

Every call keeps the GIL (``native.gst.pydll``): the per-frame ones (event record / wait, the GstCuda getters,
``cuLaunchKernel``) only queue work or read a field; the once-per-process ones (``cuInit`` after torch's own
``torch.cuda.init()``, primary-context retain, module load) return at once. Nothing here imports torch or gi.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from typing import Final

from inferstream.native.gst import bind, gst_version, pydll
from inferstream.native.structs import GstMapInfoC, check_cuda_memory_layout

GST_MAP_READ: Final = 1 << 0
GST_MAP_CUDA: Final = 1 << 17  # GST_MAP_FLAG_LAST << 1 (gst/cuda/gstcudamemory.h): 0x20000
_CU_EVENT_DISABLE_TIMING: Final = 0x2


@functools.cache
def libcuda() -> ctypes.PyDLL:
    """The CUDA driver with every function inferstream calls bound.

    Raises:
        OSError: no ``libcuda.so.1`` (no NVIDIA driver).
    """
    cu = pydll("libcuda.so.1")
    vp, i, u = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
    bind(cu, [("cuInit", i, (u,)), ("cuDeviceGet", i, (ctypes.POINTER(i), i)),
              ("cuDevicePrimaryCtxRetain", i, (ctypes.POINTER(vp), i)),
              ("cuCtxGetCurrent", i, (ctypes.POINTER(vp),)), ("cuCtxSetCurrent", i, (vp,)),
              ("cuEventCreate", i, (ctypes.POINTER(vp), u)), ("cuEventRecord", i, (vp, vp)),
              ("cuStreamWaitEvent", i, (vp, vp, u)),
              ("cuModuleLoadData", i, (ctypes.POINTER(vp), ctypes.c_char_p)),
              ("cuModuleGetFunction", i, (ctypes.POINTER(vp), vp, ctypes.c_char_p)),
              ("cuLaunchKernel", i, (vp, u, u, u, u, u, u, u, vp, ctypes.POINTER(vp), ctypes.POINTER(vp))),
              ("cuGetErrorName", i, (i, ctypes.POINTER(ctypes.c_char_p)))])
    return cu


def check_cu(result: int, call: str) -> None:
    """Raise on a CUDA driver error code (``CUresult`` != 0), naming the call and the error.

    Raises:
        RuntimeError: ``result`` is not ``CUDA_SUCCESS``.
    """
    if result != 0:
        name = ctypes.c_char_p()
        libcuda().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{call} failed: {(name.value or b'unknown error').decode()} (CUresult {result})")


def primary_context(device: int) -> int:
    """Retain the primary ``CUcontext`` of CUDA device ``device`` (the one torch uses) and return its address."""
    cu = libcuda()
    check_cu(cu.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check_cu(cu.cuDeviceGet(ctypes.byref(dev), device), f"cuDeviceGet({device})")
    check_cu(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
    if not ctx.value:
        raise RuntimeError(f"cuDevicePrimaryCtxRetain returned no context for cuda:{device}")
    return int(ctx.value)


_THREAD = threading.local()


def stream_wait(waiter: int, signaller: int, context: int) -> None:
    """Make CUDA stream ``waiter`` wait (on the device, the host does not block) for the work queued so far on
    ``signaller``; both ``CUstream`` handles of ``context``, 0 = the legacy default stream.

    One event per thread, re-recorded each time: a wait already enqueued keeps the state the event had then.
    """
    cu = libcuda()
    events: dict[int, int] = _THREAD.__dict__.setdefault("events", {})
    event = events.get(context)
    if event is None:
        current = ctypes.c_void_p()
        check_cu(cu.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        if current.value != context:
            check_cu(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        created = ctypes.c_void_p()
        check_cu(cu.cuEventCreate(ctypes.byref(created), _CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        event = events[context] = created.value or 0
    check_cu(cu.cuEventRecord(event, signaller), "cuEventRecord")
    check_cu(cu.cuStreamWaitEvent(waiter, event, 0), "cuStreamWaitEvent")


@dataclass(frozen=True, slots=True)
class GstCudaCalls:
    """libgstreamer's memory calls and libgstcuda's getters that mapping a CUDA-memory buffer makes per frame."""

    gst: ctypes.PyDLL
    cuda_gst: ctypes.PyDLL


@functools.cache
def gst_cuda_calls() -> GstCudaCalls:
    """Bind once (gi has already loaded both libraries by soname), after checking the ``GstCudaMemory`` layout
    ``native.structs`` declares holds for the running GStreamer."""
    check_cuda_memory_layout(gst_version())
    gst, cg = pydll("libgstreamer-1.0.so.0"), pydll("libgstcuda-1.0.so.0")
    vp, i = ctypes.c_void_p, ctypes.c_int
    bind(gst, [("gst_buffer_n_memory", ctypes.c_uint, (vp,)), ("gst_buffer_peek_memory", vp, (vp, ctypes.c_uint)),
               ("gst_memory_map", i, (vp, ctypes.POINTER(GstMapInfoC), i)),
               ("gst_memory_unmap", None, (vp, ctypes.POINTER(GstMapInfoC)))])
    bind(cg, [("gst_is_cuda_memory", i, (vp,)), ("gst_cuda_memory_get_stream", vp, (vp,)),
              ("gst_cuda_stream_get_handle", vp, (vp,)), ("gst_cuda_context_get_handle", vp, (vp,))])
    return GstCudaCalls(gst, cg)
