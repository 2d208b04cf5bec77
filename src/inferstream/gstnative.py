"""ctypes access to GStreamer's C API where gst-python falls short: the one place that loads those libraries.

Two reasons to go below gst-python: (1) what it cannot express (``GST_MAP_CUDA`` maps, a custom meta's own
structure); (2) speed on hot paths. Every PyGObject call releases and re-takes the GIL around the C call; with
dozens of streaming threads each call can wait for another thread's Python slice, so a per-object loop of GI calls
costs milliseconds per frame under load. Short, non-blocking C functions are therefore bound through
``ctypes.PyDLL``, which keeps the GIL for the call (no hand-off). Only bind through ``pydll`` functions that never
block or call back into Python.

The libraries are opened by soname: gi has already loaded them, so these are the same copies.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gi.repository import Gst


@functools.cache
def pydll(soname: str) -> ctypes.PyDLL:
    """The library ``soname`` with calls that keep the GIL (see the module docstring)."""
    return ctypes.PyDLL(soname)


@functools.cache
def cdll(soname: str) -> ctypes.CDLL:
    """The library ``soname`` with calls that release the GIL (for calls that may block)."""
    return ctypes.CDLL(soname)


def bind(lib: ctypes.CDLL, specs: Iterable[tuple[str, Any, tuple[Any, ...]]]) -> None:
    """Set ``restype`` / ``argtypes`` of each ``(name, restype, argtypes)`` on ``lib`` (ctypes then converts and
    checks the arguments instead of guessing C ints)."""
    for name, restype, argtypes in specs:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, list(argtypes)


class GstMiniObjectC(ctypes.Structure):
    """``GstMiniObject`` (gst/gstminiobject.h), the head of every buffer and memory."""

    _fields_ = [("type", ctypes.c_size_t), ("refcount", ctypes.c_int), ("lockstate", ctypes.c_int),
                ("flags", ctypes.c_uint), ("copy", ctypes.c_void_p), ("dispose", ctypes.c_void_p),
                ("free", ctypes.c_void_p), ("priv_uint", ctypes.c_uint), ("priv_pointer", ctypes.c_void_p)]


class _GstBufferHeadC(ctypes.Structure):
    """The public head of ``GstBuffer`` (gst/gstbuffer.h), as far as the pts."""

    _fields_ = [("mini_object", GstMiniObjectC), ("pool", ctypes.c_void_p), ("pts", ctypes.c_uint64)]


_PTS_OFFSET = _GstBufferHeadC.pts.offset
_read_u64 = ctypes.c_uint64.from_address


def buffer_pts(buf: Gst.Buffer) -> int:
    """``GST_BUFFER_PTS(buf)`` read from the struct (``Gst.CLOCK_TIME_NONE`` when unset): a third of the cost of
    gst-python's ``buf.pts``, which the per-frame paths read several times per frame."""
    return _read_u64(buffer_address(buf) + _PTS_OFFSET).value


def buffer_address(buf: Gst.Buffer) -> int:
    """``GstBuffer*`` of a gst-python buffer: ``__ptr__()`` since gst-python 1.28, the boxed hash (the pointer)
    before."""
    return int(buf.__ptr__() if hasattr(buf, "__ptr__") else hash(buf))
