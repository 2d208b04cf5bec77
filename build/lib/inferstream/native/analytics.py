"""The GstAnalytics C calls ``meta.gstanalytics`` makes per object, bound through ``native.gst.pydll``.

A frame with 20 detections costs ~100 of these calls to write or read. Through PyGObject each one released the
GIL (see ``native.gst``), and under many streaming threads each re-acquisition waited for another thread's Python
(BENCHMARKS.md, *Figures from the code*). Bound here they keep the GIL.

API used exists since GStreamer 1.24 (oriented boxes: 1.26). Mtd ids are the indices 0..length-1 of the relation
meta (``gst_analytics_relation_meta_get_mtd`` rejects any id >= length), so a handle is built, not looked up.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Final

from inferstream.native.gst import bind, pydll

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


# -- the per-frame loops in C (``native.cc``): one call per frame instead of two per box --------------------------

_LOOPS_SOURCE = r"""
typedef struct { unsigned int id; void *meta; } Mtd;  /* GstAnalyticsMtd */
typedef struct {  /* GstAnalytics functions, handed over from the library gi loaded: nothing to link */
    int (*add_od)(void *, unsigned int, int, int, int, int, float, Mtd *);
    int (*add_oriented_od)(void *, unsigned int, int, int, int, int, float, float, Mtd *);
    int (*add_one_cls)(void *, float, unsigned int, Mtd *);
    int (*set_relation)(void *, int, unsigned int, unsigned int);
    int (*add_tracking)(void *, unsigned long long, unsigned long long, Mtd *);
    int (*update_last_seen)(Mtd *, unsigned long long);
    int (*set_lost)(Mtd *);
} Api;

/* n ODMtds (oriented when angles is not NULL) into ids; then, for a producer quark other than 0, one ClsMtd that
   CONTAINs each of them. Returns -1, or the row whose ODMtd failed (n: the ClsMtd). */
int write_ods(const Api *api, void *rmeta, int n, const unsigned int *quarks, const int *xywh,
              const float *scores, const float *angles, unsigned int producer, int contain, unsigned int *ids)
{
    Mtd mtd;
    for (int i = 0; i < n; ++i) {
        const int *b = xywh + 4 * i;
        int ok = angles ? api->add_oriented_od(rmeta, quarks[i], b[0], b[1], b[2], b[3], angles[i], scores[i], &mtd)
                        : api->add_od(rmeta, quarks[i], b[0], b[1], b[2], b[3], scores[i], &mtd);
        if (!ok) return i;
        ids[i] = mtd.id;
    }
    if (producer) {
        if (!api->add_one_cls(rmeta, 1.0f, producer, &mtd)) return n;
        for (int i = 0; i < n; ++i) api->set_relation(rmeta, contain, mtd.id, ids[i]);
    }
    return -1;
}

/* The TrackingMtds of several frames: frame f gets counts[f] of them in its relation meta rmetas[f], from the
   next columns of table [5][stride] (rows: ODMtd id, track id, first seen, last seen, lost), each RELATE_TO from
   its ODMtd. Returns -1, or the column that failed. */
long long write_track_table(const Api *api, int n_frames, void *const *rmetas, const long long *counts,
                            const long long *table, long long stride, int relate_to)
{
    Mtd mtd;
    long long k = 0;
    for (int f = 0; f < n_frames; ++f)
        for (long long end = k + counts[f]; k < end; ++k) {
            if (!api->add_tracking(rmetas[f], (unsigned long long)table[stride + k],
                                   (unsigned long long)table[2 * stride + k], &mtd)) return k;
            api->update_last_seen(&mtd, (unsigned long long)table[3 * stride + k]);
            if (table[4 * stride + k]) api->set_lost(&mtd);
            api->set_relation(rmetas[f], relate_to, (unsigned int)table[k], mtd.id);
        }
    return -1;
}

"""
_LOOP_API = ("gst_analytics_relation_meta_add_od_mtd", "gst_analytics_relation_meta_add_oriented_od_mtd",
             "gst_analytics_relation_meta_add_one_cls_mtd", "gst_analytics_relation_meta_set_relation",
             "gst_analytics_relation_meta_add_tracking_mtd", "gst_analytics_tracking_mtd_update_last_seen",
             "gst_analytics_tracking_mtd_set_lost")


class _LoopApi(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in _LOOP_API]


@dataclass(frozen=True)
class Loops:
    """``write_ods`` / ``write_track_table`` of ``_LOOPS_SOURCE`` (array arguments as addresses), and the function table
    they take first."""

    write_ods: ctypes._CFuncPtr  # type: ignore[name-defined]
    write_track_table: ctypes._CFuncPtr  # type: ignore[name-defined]
    api: ctypes._CArgObject


@functools.cache
def loops() -> Loops | None:
    """The compiled loops, or None where no C compiler could build them (the callers loop in Python)."""
    from inferstream.native.cc import load_c

    lib = load_c("inferstream_analytics_loops", _LOOPS_SOURCE)
    if lib is None:
        return None
    vp, i, u = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint
    bind(lib, [("write_ods", i, (vp, vp, i, vp, vp, vp, vp, u, i, vp)),
               ("write_track_table", ctypes.c_longlong, (vp, i, vp, vp, vp, ctypes.c_longlong, i))])
    gst = analytics().lib
    table = _LoopApi(*(ctypes.cast(getattr(gst, name), ctypes.c_void_p).value for name in _LOOP_API))
    return Loops(lib.write_ods, lib.write_track_table, ctypes.byref(table))
