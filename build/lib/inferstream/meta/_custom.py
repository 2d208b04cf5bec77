"""GstCustomMeta with a GstStructure written and read through ctypes.

``CustomMeta.get_structure()`` in gst-python returns a copy (PyGObject copies transfer-none boxed returns), so
fields set from Python are lost; these helpers write into the meta's own structure with C API present since 1.20.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

from inferstream.native.gst import buffer_address, cdll

if TYPE_CHECKING:
    from gi.repository import Gst


class _GValue(ctypes.Structure):
    _fields_ = [("g_type", ctypes.c_size_t), ("data", ctypes.c_uint64 * 2)]


_PV = ctypes.POINTER(_GValue)
_G_TYPE_INT64: Final = 10 << 2  # G_TYPE_MAKE_FUNDAMENTAL(10)
_G_TYPE_UINT64: Final = 11 << 2
_G_TYPE_STRING: Final = 16 << 2


@functools.cache
def _libs() -> tuple[Any, Any]:
    gst, gobj = cdll("libgstreamer-1.0.so.0"), cdll("libgobject-2.0.so.0")
    vp, cp, size = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    for lib, name, res, args in (
            (gst, "gst_buffer_add_custom_meta", vp, (vp, cp)), (gst, "gst_custom_meta_get_structure", vp, (vp,)),
            (gst, "gst_meta_get_info", vp, (cp,)),
            (gst, "gst_buffer_iterate_meta_filtered", vp, (vp, ctypes.POINTER(vp), size)),
            (gst, "gst_structure_take_value", None, (vp, cp, _PV)), (gst, "gst_structure_get_value", _PV, (vp, cp)),
            (gobj, "g_value_init", _PV, (_PV, size)), (gobj, "g_value_set_string", None, (_PV, cp)),
            (gobj, "g_value_set_uint64", None, (_PV, ctypes.c_uint64)),
            (gobj, "g_value_set_int64", None, (_PV, ctypes.c_int64)), (gobj, "g_value_get_string", vp, (_PV,)),
            (gobj, "g_value_get_uint64", ctypes.c_uint64, (_PV,)), (gobj, "g_value_get_int64", ctypes.c_int64, (_PV,))):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, list(args)
    return gst, gobj


_REGISTERING = threading.Lock()


@functools.cache
def register(name: str) -> int:
    """Register custom meta ``name`` (idempotent, after Gst.init); returns its API GType.

    Under one lock: every element's streaming thread may be first, and a second registration of a name fails while
    the first is under way (GStreamer's meta table has no entry yet), so its lookup came back NULL.
    """
    import gi

    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    with _REGISTERING:
        if Gst.meta_get_info(name) is None:
            Gst.meta_register_custom_simple(name)
        info = _libs()[0].gst_meta_get_info(name.encode())
    if not info:
        raise RuntimeError(f"GStreamer did not register the custom meta {name!r}")
    return int(ctypes.c_size_t.from_address(info).value)  # GstMetaInfo.api


def _value(gtype: int, setter: str, value: object) -> _GValue:
    v = _GValue()
    gobj = _libs()[1]
    gobj.g_value_init(ctypes.byref(v), gtype)
    getattr(gobj, setter)(ctypes.byref(v), value)
    return v


def add(buf: Gst.Buffer, name: str, *, strings: dict[str, str | int], int64s: dict[str, int],
        uint64s: dict[str, int]) -> None:
    """Add one custom meta ``name`` with these fields to the writable ``buf`` (strings without NUL bytes).

    Raises:
        ValueError: the buffer is not writable.
    """
    register(name)
    gst = _libs()[0]
    meta = gst.gst_buffer_add_custom_meta(buffer_address(buf), name.encode())
    if not meta:
        raise ValueError(f"cannot add the {name} meta (buffer not writable?)")
    structure = gst.gst_custom_meta_get_structure(meta)
    values = ([(k, _value(_G_TYPE_STRING, "g_value_set_string", str(v).encode())) for k, v in strings.items()]
              + [(k, _value(_G_TYPE_INT64, "g_value_set_int64", v)) for k, v in int64s.items()]
              + [(k, _value(_G_TYPE_UINT64, "g_value_set_uint64", v)) for k, v in uint64s.items()])
    for key, value in values:
        gst.gst_structure_take_value(structure, key.encode(), ctypes.byref(value))  # takes ownership


def structures(buf: Gst.Buffer, name: str) -> Iterator[int]:
    """The structure address of every custom meta ``name`` on ``buf``, in the order they were added."""
    gst, api = _libs()[0], register(name)
    addr, state = buffer_address(buf), ctypes.c_void_p(None)
    while meta := gst.gst_buffer_iterate_meta_filtered(addr, ctypes.byref(state), api):
        yield gst.gst_custom_meta_get_structure(meta)


def get_string(structure: int, field: str) -> str | None:
    gst, gobj = _libs()
    value = gst.gst_structure_get_value(structure, field.encode())
    if not value:
        return None
    ptr = gobj.g_value_get_string(value)
    return ctypes.string_at(ptr).decode() if ptr else ""


def get_uint64(structure: int, field: str) -> int:
    gst, gobj = _libs()
    value = gst.gst_structure_get_value(structure, field.encode())
    return int(gobj.g_value_get_uint64(value)) if value else 0


def int64_getter(structure: int) -> Callable[[str], int]:
    """A reader of the int64 fields of ``structure`` (-1 for a missing one)."""
    gst, gobj = _libs()

    def get(field: str) -> int:
        value = gst.gst_structure_get_value(structure, field.encode())
        return int(gobj.g_value_get_int64(value)) if value else -1

    return get
