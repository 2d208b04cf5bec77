"""Classifications of objects as GstAnalytics metadata (secondary inference's results).

Conventions (DESIGN.md "Metadata contract"):
  * one ``ClsMtd`` per classified object: quark = the class label, level = its probability, related ``RELATE_TO``
    from the object's ``ODMtd`` (DESIGN.md's convention; ``pyosd`` draws it after the box's label, stock
    ``objectdetectionoverlay`` 1.28 draws only the ODMtd's type);
  * the producer is recorded as for detections: one ``ClsMtd`` per producer and buffer, quark
    ``inferstream/producer/<id>``, related ``CONTAIN`` to each ClsMtd it produced. Its second entry, when
    present, is ``inferstream/classifier-type/<name>`` (nvinfer's ``classifier-type``): the attribute name the
    DeepStream payload files the label under.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from inferstream.errors import MetaWriteError
from inferstream.meta.gstanalytics import PRODUCER_PREFIX, _related, _relation_meta
from inferstream.native.analytics import REL_CONTAIN, REL_RELATE_TO, Mtd, analytics, quark, quark_name
from inferstream.native.gst import bind, buffer_address

if TYPE_CHECKING:
    from gi.repository import Gst

TYPE_PREFIX = "inferstream/classifier-type/"


class Classification(NamedTuple):
    """One classification of an object, as read back."""

    label: str
    confidence: float
    producer: int  # -1: not recorded
    kind: str  # the classifier-type ("" when not recorded)


@functools.cache
def _lib() -> ctypes.PyDLL:
    """The analytics library with the ClsMtd calls ``native.analytics`` does not bind."""
    lib = analytics().lib
    vp, sz, pm = ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(Mtd)
    bind(lib, [("gst_analytics_relation_meta_add_cls_mtd", ctypes.c_int,
                (vp, sz, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_uint), pm)),
               ("gst_analytics_cls_mtd_get_length", sz, (pm,)),
               ("gst_analytics_cls_mtd_get_level", ctypes.c_float, (pm, sz))])
    return lib


def producer_record_quarks(unique_id: int, kind: str = "") -> tuple[int, ...]:
    """The quarks of a classifier's producer record (``kind``: its classifier-type, "" for none)."""
    head = quark(f"{PRODUCER_PREFIX}{unique_id}")
    return (head, quark(f"{TYPE_PREFIX}{kind}")) if kind else (head,)


def write_classifications(buf: Gst.Buffer, od_ids: Sequence[int], labels: Sequence[int], scores: Sequence[float],
                          quarks: Sequence[int], producer: Sequence[int] | None = None) -> list[int]:
    """One ClsMtd per object, related RELATE_TO from its ODMtd; returns the ClsMtd ids.

    Args:
        buf: a writable buffer carrying the ODMtds.
        od_ids: the ODMtd id of each object.
        labels: class index per object (into ``quarks``).
        scores: probability per object.
        quarks: label quark per class index.
        producer: ``producer_record_quarks`` to record the producer, or None.

    Raises:
        MetaWriteError: a ClsMtd cannot be added.
    """
    lib = _lib()
    rmeta = _relation_meta(buf)
    add, relate = lib.gst_analytics_relation_meta_add_one_cls_mtd, lib.gst_analytics_relation_meta_set_relation
    cls = Mtd()
    ref = ctypes.byref(cls)
    ids = []
    for od_id, label, score in zip(od_ids, labels, scores):
        if not add(rmeta, score, quarks[label], ref):
            raise MetaWriteError(f"add_one_cls_mtd failed for class {label}")
        relate(rmeta, REL_RELATE_TO, od_id, cls.id)
        ids.append(cls.id)
    if producer:
        n = len(producer)
        levels, qs = (ctypes.c_float * n)(*([1.0] * n)), (ctypes.c_uint * n)(*producer)
        if not lib.gst_analytics_relation_meta_add_cls_mtd(rmeta, n, levels, qs, ref):
            raise MetaWriteError("add_cls_mtd failed for the producer record")
        for cls_id in ids:
            relate(rmeta, REL_CONTAIN, cls.id, cls_id)
    return ids


def read_classifications(buf: Gst.Buffer, od_ids: Sequence[int]) -> list[tuple[Classification, ...]]:
    """The classifications related RELATE_TO from each ODMtd (e.g. ``FrameMeta.od_ids``), in ClsMtd id order.

    Producer records are not classifications; a ClsMtd that no producer record contains has producer -1. A buffer
    without classifications costs one pass over its mtds.
    """
    api, lib = analytics(), _lib()
    rmeta = api.lib.gst_buffer_get_analytics_relation_meta(buffer_address(buf))
    empty: list[tuple[Classification, ...]] = [() for _ in od_ids]
    if not rmeta or not od_ids:
        return empty
    cls = Mtd(0, rmeta)
    ref = ctypes.byref(cls)
    records: dict[int, tuple[int, str]] = {}  # producer record id -> (unique id, classifier-type)
    plain: set[int] = set()
    for i in range(lib.gst_analytics_relation_get_length(rmeta)):
        cls.id = i
        if lib.gst_analytics_mtd_get_mtd_type(ref) != api.cls_type:
            continue
        name = quark_name(lib.gst_analytics_cls_mtd_get_quark(ref, 0))
        if not name.startswith(PRODUCER_PREFIX):
            plain.add(i)
            continue
        second = quark_name(lib.gst_analytics_cls_mtd_get_quark(ref, 1)) \
            if lib.gst_analytics_cls_mtd_get_length(ref) > 1 else ""
        records[i] = (int(name[len(PRODUCER_PREFIX):]), second[len(TYPE_PREFIX):] if second.startswith(TYPE_PREFIX)
                      else "")
    if not plain:
        return empty
    producer_of = {member: who for rec, who in records.items()
                   for member in _related(rmeta, rec, REL_CONTAIN, api.cls_type, Mtd())}
    out = []
    for od_id in od_ids:
        found = []
        for cls_id in list(_related(rmeta, od_id, REL_RELATE_TO, api.cls_type, Mtd())):
            if cls_id in plain:
                cls.id = cls_id
                found.append(Classification(quark_name(lib.gst_analytics_cls_mtd_get_quark(ref, 0)),
                                            float(lib.gst_analytics_cls_mtd_get_level(ref, 0)),
                                            *producer_of.get(cls_id, (-1, ""))))
        out.append(tuple(found))
    return out
