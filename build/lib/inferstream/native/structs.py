"""The GStreamer C structs read through ctypes, in one place, and the versions their layouts hold for.

The core ones (``GstMiniObject``, ``GstBuffer``'s head, ``GstMemory``, ``GstMapInfo``, ``GstVideoInfo``) are public
ABI, stable across GStreamer 1.x. ``GstCudaMemory`` is unstable API (``GST_USE_UNSTABLE_API``): its layout is only
known for the releases it was checked against, so ``check_cuda_memory_layout`` refuses any other before a field is
read. ``tests/native/test_structs.py`` compares every layout with the C compiler's ``offsetof`` / ``sizeof`` on the
installed headers (and pins the CUDA one, whose headers need the CUDA toolkit).
"""
from __future__ import annotations

import ctypes
from typing import Final

from inferstream.errors import UnsupportedFormatError

# GstCudaMemory as declared by these releases' gst/cuda/gstcudamemory.h (x86_64), oldest and newest inclusive
CUDA_MEMORY_LAYOUT_VERSIONS: Final = ((1, 24), (1, 28))


class GstMiniObjectC(ctypes.Structure):
    """``GstMiniObject`` (gst/gstminiobject.h), the head of every buffer and memory."""

    _fields_ = [("type", ctypes.c_size_t), ("refcount", ctypes.c_int), ("lockstate", ctypes.c_int),
                ("flags", ctypes.c_uint), ("copy", ctypes.c_void_p), ("dispose", ctypes.c_void_p),
                ("free", ctypes.c_void_p), ("priv_uint", ctypes.c_uint), ("priv_pointer", ctypes.c_void_p)]


class GstBufferHeadC(ctypes.Structure):
    """The public head of ``GstBuffer`` (gst/gstbuffer.h), as far as the pts."""

    _fields_ = [("mini_object", GstMiniObjectC), ("pool", ctypes.c_void_p), ("pts", ctypes.c_uint64)]


class GstMapInfoC(ctypes.Structure):
    """``GstMapInfo`` (gst/gstmemory.h)."""

    _fields_ = [("memory", ctypes.c_void_p), ("flags", ctypes.c_int), ("data", ctypes.c_void_p),
                ("size", ctypes.c_size_t), ("maxsize", ctypes.c_size_t), ("user_data", ctypes.c_void_p * 4),
                ("_gst_reserved", ctypes.c_void_p * 4)]


class GstMemoryC(ctypes.Structure):
    """``GstMemory`` (gst/gstmemory.h)."""

    _fields_ = [("mini_object", GstMiniObjectC), ("allocator", ctypes.c_void_p), ("parent", ctypes.c_void_p),
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

    _fields_ = [("mem", GstMemoryC), ("context", ctypes.c_void_p), ("info", GstVideoInfoC),
                ("priv", ctypes.c_void_p), ("_gst_reserved", ctypes.c_void_p * 4)]


def check_cuda_memory_layout(version: tuple[int, int]) -> None:
    """Refuse a GStreamer whose ``GstCudaMemory`` layout was not checked (reading it would read garbage).

    Args:
        version: the running GStreamer's (major, minor).

    Raises:
        UnsupportedFormatError: ``version`` is outside ``CUDA_MEMORY_LAYOUT_VERSIONS``.
    """
    oldest, newest = CUDA_MEMORY_LAYOUT_VERSIONS
    if not oldest <= version <= newest:
        raise UnsupportedFormatError(
            f"CUDA memory: GstCudaMemory's layout is known for GStreamer {oldest[0]}.{oldest[1]} to "
            f"{newest[0]}.{newest[1]}, this is {version[0]}.{version[1]}: put cudadownload before pyinfer, or check "
            f"the layout (tests/native/test_structs.py) and widen inferstream.native.structs."
            f"CUDA_MEMORY_LAYOUT_VERSIONS")
