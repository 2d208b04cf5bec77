"""The GstAnalytics C calls ``meta.gstanalytics`` makes per object, bound through ``gstnative.pydll``.

A frame with 20 detections costs ~100 of these calls to write or read. Through PyGObject each one released the
GIL (see ``gstnative``): under 16-32 streaming threads, reading one frame's detections took 7.8 ms on the H200
host instead of ~0.3 ms. Bound here they keep the GIL and cost well under a microsecond each.

API used exists since GStreamer 1.24 (oriented boxes: 1.26). Mtd ids are the indices 0..length-1 of the relation
meta (``gst_analytics_relation_meta_get_mtd`` rejects any id >= length), so a handle is built, not looked up.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Final

from inferstream.gstnative import bind, pydll

REL_CONTAIN: Final = 1 << 2  # GST_ANALYTICS_REL_TYPE_CONTAIN
REL_RELATE_TO: Final = 1 << 3  # GST_ANALYTICS_REL_TYPE_RELATE_TO


class Mtd(ctypes.Structure):
    """``GstAnalyticsMtd`` (and its typedefs ODMtd, ClsMtd, TrackingMtd): a handle, not the data."""

    _fields_ = [("id", ctypes.c_uint), ("meta", ctypes.c_void_p)]


@dataclass(frozen=True, slots=True)
class Analytics:
    """The bound library plus the mtd type ids (``GstAnalyticsMtdType`` values are the impl addresses)."""

    lib: ctypes.PyDLL
    glib: ctypes.PyDLL
    od_type: int
    cls_type: int
    tracking_type: int


@functools.cache
def analytics() -> Analytics:
    """Load and bind once (after ``Gst.init``)."""
    lib, glib = pydll("libgstanalytics-1.0.so.0"), pydll("libglib-2.0.so.0")
    vp, u, i, f, u64, sz = (ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_float, ctypes.c_uint64,
                            ctypes.c_size_t)
    pm, pi, pf, pu64 = (ctypes.POINTER(Mtd), ctypes.POINTER(i), ctypes.POINTER(f), ctypes.POINTER(u64))
    bind(lib, [
        ("gst_buffer_get_analytics_relation_meta", vp, (vp,)),
        ("gst_buffer_add_analytics_relation_meta", vp, (vp,)),
        ("gst_analytics_relation_get_length", sz, (vp,)),
        ("gst_analytics_mtd_get_mtd_type", sz, (pm,)),
        ("gst_analytics_relation_meta_set_relation", i, (vp, i, u, u)),
        ("gst_analytics_relation_meta_get_direct_related", i, (vp, u, i, sz, ctypes.POINTER(vp), pm)),
        ("gst_analytics_od_mtd_get_mtd_type", sz, ()),
        ("gst_analytics_cls_mtd_get_mtd_type", sz, ()),
        ("gst_analytics_tracking_mtd_get_mtd_type", sz, ()),
        ("gst_analytics_relation_meta_add_od_mtd", i, (vp, u, i, i, i, i, f, pm)),
        ("gst_analytics_relation_meta_add_oriented_od_mtd", i, (vp, u, i, i, i, i, f, f, pm)),
        ("gst_analytics_od_mtd_get_oriented_location", i, (pm, pi, pi, pi, pi, pf, pf)),
        ("gst_analytics_od_mtd_get_obj_type", u, (pm,)),
        ("gst_analytics_relation_meta_add_one_cls_mtd", i, (vp, f, u, pm)),
        ("gst_analytics_cls_mtd_get_quark", u, (pm, sz)),
        ("gst_analytics_relation_meta_add_tracking_mtd", i, (vp, u64, u64, pm)),
        ("gst_analytics_tracking_mtd_update_last_seen", i, (pm, u64)),
        ("gst_analytics_tracking_mtd_set_lost", i, (pm,)),
        ("gst_analytics_tracking_mtd_get_info", i, (pm, pu64, pu64, pu64, pi)),
    ])
    bind(glib, [("g_quark_to_string", ctypes.c_char_p, (u,)), ("g_quark_from_string", u, (ctypes.c_char_p,))])
    return Analytics(lib, glib, lib.gst_analytics_od_mtd_get_mtd_type(), lib.gst_analytics_cls_mtd_get_mtd_type(),
                     lib.gst_analytics_tracking_mtd_get_mtd_type())


@functools.lru_cache(maxsize=4096)
def quark_name(quark: int) -> str:
    """The string of a quark (quarks are never freed, so the cache stays exact)."""
    name = analytics().glib.g_quark_to_string(quark)
    return name.decode() if name else ""


def quark(name: str) -> int:
    """``g_quark_from_string``: only for bounded sets of strings (labels), quarks are never freed."""
    return int(analytics().glib.g_quark_from_string(name.encode()))
