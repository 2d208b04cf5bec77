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

from inferstream.native.structs import GstBufferHeadC

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


_PTS_OFFSET = GstBufferHeadC.pts.offset
_read_u64 = ctypes.c_uint64.from_address


def buffer_pts(buf: Gst.Buffer) -> int:
    """``GST_BUFFER_PTS(buf)`` read from the struct (``Gst.CLOCK_TIME_NONE`` when unset): a third of the cost of
    gst-python's ``buf.pts``, which the per-frame paths read several times per frame."""
    return _read_u64(buffer_address(buf) + _PTS_OFFSET).value


def buffer_address(buf: Gst.Buffer) -> int:
    """``GstBuffer*`` of a gst-python buffer: ``__ptr__()`` since gst-python 1.28, the boxed hash (the pointer)
    before."""
    return int(buf.__ptr__() if hasattr(buf, "__ptr__") else hash(buf))


def c_address(value: Any) -> int:
    """A C pointer as int, whether it came back as an int, None or a PyCapsule (GI ``gpointer`` returns)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return int(get(value, None) or 0)


@functools.cache
def gst_version() -> tuple[int, int]:
    """The running GStreamer's (major, minor), from ``gst_version`` of the library gi loaded."""
    lib = pydll("libgstreamer-1.0.so.0")
    parts = [ctypes.c_uint() for _ in range(4)]
    lib.gst_version(*map(ctypes.byref, parts))
    return parts[0].value, parts[1].value


class _TypeQuery(ctypes.Structure):
    _fields_ = [("type", ctypes.c_size_t), ("type_name", ctypes.c_char_p), ("class_size", ctypes.c_uint),
                ("instance_size", ctypes.c_uint)]


def skip_transform_ip_in_passthrough(type_name: str) -> bool:
    """Clear ``transform_ip_on_passthrough`` in the class of the registered ``GstBase.BaseTransform`` subclass
    ``type_name``: in passthrough the base class then pushes each buffer without calling ``transform_ip``, where a
    Python element otherwise pays a PyGObject call per buffer. PyGObject has no setter for class fields. The field
    follows ``GstElementClass`` and ``passthrough_on_same_caps`` in ``GstBaseTransformClass``; it is only written
    while it holds its default (TRUE). Returns whether it was cleared.
    """
    gobject = pydll("libgobject-2.0.so.0")
    bind(gobject, [("g_type_from_name", ctypes.c_size_t, (ctypes.c_char_p,)),
                   ("g_type_class_ref", ctypes.c_void_p, (ctypes.c_size_t,)),
                   ("g_type_query", None, (ctypes.c_size_t, ctypes.POINTER(_TypeQuery)))])
    query = _TypeQuery()
    gobject.g_type_query(gobject.g_type_from_name(b"GstElement"), ctypes.byref(query))
    element_type = gobject.g_type_from_name(type_name.encode())
    klass = gobject.g_type_class_ref(element_type) if element_type else None  # a type's class is never freed
    if not query.class_size or not klass:
        return False
    flag = ctypes.c_int.from_address(klass + query.class_size + ctypes.sizeof(ctypes.c_int))
    if flag.value != 1:
        return False
    flag.value = 0
    return True
