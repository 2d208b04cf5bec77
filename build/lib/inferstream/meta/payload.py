"""Frame payloads (JSON messages) carried on buffers from pymsgconv to pymsgbroker as a ``GstCustomMeta``.

Payloads travel as a ``GstCustomMeta`` named ``inferstream-payload`` (one per frame and pymsgconv)::

    inferstream-payload, schema=(string)deepstream-full, stream-id=(string)cam1, frame=(guint64)12,
                         payloads=(string)< "{...}", "{...}" >

gst-python cannot fill it: ``CustomMeta.get_structure()`` returns a *copy* (PyGObject copies transfer-none boxed
returns; gst-python 1.26 and 1.28 have no writable-structure helper for custom meta, unlike Event/Caps/Query), so
fields set on it are lost. The fields are therefore written through ctypes into the meta's own structure, with
C API present since 1.20/1.24 (``gst_buffer_add_custom_meta``, ``gst_custom_meta_get_structure``,
``gst_structure_take_value``, ``gst_meta_register_custom_simple``). Readers need nothing special: C/Rust read it
with ``gst_buffer_get_custom_meta``; Python with ``buf.get_custom_meta("inferstream-payload").get_structure()``
(a copy, fine for reading); :func:`read_payloads` (ctypes) reads every such meta of a buffer.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any, Final

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.native.gst import buffer_address, cdll

PAYLOAD_META: Final = "inferstream-payload"


# one GValue type for every module that binds these (shared) libraries: ctypes checks argtypes by identity
from inferstream.meta._custom import _G_TYPE_STRING, _G_TYPE_UINT64, _PV, _GValue, register


@dataclass(frozen=True, slots=True)
class PayloadMeta:
    """One ``inferstream-payload`` meta read back: ``payloads`` in order (UTF-8 JSON bytes)."""

    schema: str
    stream_id: str
    frame: int
    payloads: tuple[bytes, ...]


@functools.cache
def _native() -> Any:
    """libgstreamer/libgobject entry points (already loaded by gi under the same sonames) + the meta's API type."""
    gst, gobj = cdll("libgstreamer-1.0.so.0"), cdll("libgobject-2.0.so.0")
    vp, cp, size, uint = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint
    for lib, name, res, args in (
            (gst, "gst_buffer_add_custom_meta", vp, (vp, cp)), (gst, "gst_custom_meta_get_structure", vp, (vp,)),
            (gst, "gst_custom_meta_has_name", ctypes.c_int, (vp, cp)),
            (gst, "gst_buffer_iterate_meta_filtered", vp, (vp, ctypes.POINTER(vp), size)),
            (gst, "gst_structure_take_value", None, (vp, cp, _PV)), (gst, "gst_structure_get_value", _PV, (vp, cp)),
            (gst, "gst_value_array_get_type", size, ()), (gst, "gst_value_array_append_and_take_value", None, (_PV, _PV)),
            (gst, "gst_value_array_get_size", uint, (_PV,)), (gst, "gst_value_array_get_value", _PV, (_PV, uint)),
            (gobj, "g_value_init", _PV, (_PV, size)), (gobj, "g_value_set_string", None, (_PV, cp)),
            (gobj, "g_value_set_uint64", None, (_PV, ctypes.c_uint64)), (gobj, "g_value_get_string", vp, (_PV,)),
            (gobj, "g_value_get_uint64", ctypes.c_uint64, (_PV,))):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, list(args)
    return gst, gobj, register(PAYLOAD_META)


def register_payload_meta() -> None:
    """Register the ``inferstream-payload`` custom meta (idempotent; after Gst.init)."""
    _native()


def _value(gtype: int, setter: str, value: object) -> _GValue:
    gobj = _native()[1]
    v = _GValue()
    gobj.g_value_init(ctypes.byref(v), gtype)
    getattr(gobj, setter)(ctypes.byref(v), value)
    return v


def attach_payloads(buf: Gst.Buffer, payloads: list[bytes], *, schema: str, stream_id: str, frame: int) -> None:
    """Add one ``inferstream-payload`` meta holding ``payloads`` (UTF-8 JSON, no NUL bytes) to a writable buffer.

    Raises:
        ValueError: the buffer is not writable (the meta cannot be added).
    """
    gst, gobj, _ = _native()
    meta = gst.gst_buffer_add_custom_meta(buffer_address(buf), PAYLOAD_META.encode())
    if not meta:
        raise ValueError("cannot add the inferstream-payload meta (buffer not writable?)")
    structure = gst.gst_custom_meta_get_structure(meta)
    array = _GValue()
    gobj.g_value_init(ctypes.byref(array), gst.gst_value_array_get_type())
    for payload in payloads:
        gst.gst_value_array_append_and_take_value(ctypes.byref(array),
                                                  ctypes.byref(_value(_G_TYPE_STRING, "g_value_set_string", payload)))
    for name, value in ((b"schema", _value(_G_TYPE_STRING, "g_value_set_string", schema.encode())),
                        (b"stream-id", _value(_G_TYPE_STRING, "g_value_set_string", stream_id.encode())),
                        (b"frame", _value(_G_TYPE_UINT64, "g_value_set_uint64", frame)), (b"payloads", array)):
        gst.gst_structure_take_value(structure, name, ctypes.byref(value))  # takes ownership: no unset


def _string(gobj: Any, value: Any) -> bytes:
    return ctypes.string_at(gobj.g_value_get_string(value)) if value else b""


def read_payloads(buf: Gst.Buffer) -> list[PayloadMeta]:
    """Every ``inferstream-payload`` meta of ``buf``, in the order they were added."""
    gst, gobj, api = _native()
    addr, state, out = buffer_address(buf), ctypes.c_void_p(None), []
    while meta := gst.gst_buffer_iterate_meta_filtered(addr, ctypes.byref(state), api):
        if not gst.gst_custom_meta_has_name(meta, PAYLOAD_META.encode()):
            continue
        s = gst.gst_custom_meta_get_structure(meta)
        array = gst.gst_structure_get_value(s, b"payloads")
        n = gst.gst_value_array_get_size(array) if array else 0
        frame = gst.gst_structure_get_value(s, b"frame")
        out.append(PayloadMeta(
            _string(gobj, gst.gst_structure_get_value(s, b"schema")).decode(),
            _string(gobj, gst.gst_structure_get_value(s, b"stream-id")).decode(),
            gobj.g_value_get_uint64(frame) if frame else 0,
            tuple(_string(gobj, gst.gst_value_array_get_value(array, i)) for i in range(n))))
    return out
