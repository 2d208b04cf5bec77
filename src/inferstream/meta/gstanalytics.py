"""Write and read Detections as GstAnalytics metadata — the one place that knows its API and conventions.

Conventions (see DESIGN.md "Metadata contract"):
  * one ``GstAnalyticsRelationMeta`` per buffer (reused when upstream already attached one);
  * one ``ODMtd`` per detection: type quark = label string, confidence, box in the frame's pixels; oriented boxes use
    the oriented ODMtd (x, y = top-left of the unrotated box, ``r`` radians clockwise about the centre);
  * the producer (nvinfer's ``unique-id``) is recoverable: one ``ClsMtd`` per producer and buffer with quark
    ``inferstream/producer/<id>``, related ``CONTAIN`` to each ODMtd it produced;
  * tracking: a ``TrackingMtd`` related ``RELATE_TO`` from the ODMtd (what objectdetectionoverlay and ioutracker use;
    written by ``meta.tracks``).
Works with GStreamer 1.26 and 1.28. The per-object calls go through ctypes (``native.analytics``), not PyGObject: the
GI calls released the GIL each time, which made metadata cost milliseconds per frame with many streaming threads.
"""
from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferstream.errors import MetaWriteError
from inferstream.meta import handoff
from inferstream.native.analytics import REL_CONTAIN, REL_RELATE_TO, Loops, Mtd, analytics, loops, quark, quark_name
from inferstream.native.gst import buffer_address, buffer_pts

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from gi.repository import Gst
    from torch import Tensor

    from inferstream.detections import Detections

PRODUCER_PREFIX = "inferstream/producer/"


def label_quarks(labels: Sequence[str]) -> list[int]:
    """Quarks for a model's label table; quarks are never freed, so only bounded label sets go here."""
    return [quark(name) for name in labels]


def producer_quark(unique_id: int) -> int:
    return quark(f"{PRODUCER_PREFIX}{unique_id}")


def _relation_meta(buf: Gst.Buffer) -> int:
    """Address of the buffer's relation meta, added when absent (the buffer must be writable)."""
    lib, addr = analytics().lib, buffer_address(buf)
    rmeta = lib.gst_buffer_get_analytics_relation_meta(addr) or lib.gst_buffer_add_analytics_relation_meta(addr)
    if not rmeta:
        raise MetaWriteError("cannot add GstAnalyticsRelationMeta (buffer not writable?)")
    return int(rmeta)


def write_detections(buf: Gst.Buffer, dets: Detections, quarks: Sequence[int],
                     producer: int | None = None) -> list[int]:
    """Attach ``dets`` (CPU tensors, frame pixels) to ``buf``; returns the ODMtd ids in row order.

    Args:
        buf: a writable buffer.
        dets: detections in the frame's pixel space.
        quarks: label quark per class index (``label_quarks``).
        producer: the quark from ``producer_quark`` or None to not record the producer.
    """
    lib = analytics().lib
    rmeta = _relation_meta(buf)
    fresh = lib.gst_analytics_relation_get_length(rmeta) == 0
    # ODMtd holds whole pixels: round the edges (not x and w separately) so each edge is off by at most 0.5 px
    edges = dets.boxes_xyxy.round()
    native = loops()
    if native is not None:
        ids, row_quarks, first_box = _write_ods_native(native, rmeta, edges, dets, quarks, producer)
    else:
        ids, row_quarks, first_box = _write_ods(lib, rmeta, edges, dets, quarks, producer)
    if fresh:  # all a read would find: leave it for the next reader (handoff)
        handoff.leave(buffer_address(buf), handoff.Written(
            rmeta, lib.gst_analytics_relation_get_length(rmeta), buffer_pts(buf), edges, dets.scores, dets.angles_rad,
            row_quarks, ids, None if producer is None else _producer_id(producer), first_box))
    return ids


_OdsWritten = tuple[list[int], list[int], "tuple[int, int, int, int] | None"]  # ODMtd ids, quark per row, first box


def _write_ods_native(native: Loops, rmeta: int, edges: Tensor, dets: Detections, quarks: Sequence[int],
                      producer: int | None) -> _OdsWritten:
    """``write_detections``' ODMtds (and producer record) in one call of the compiled loop."""
    import numpy as np

    from inferstream.ops.boxes import xyxy_to_xywh

    xywh = xyxy_to_xywh(edges.numpy().astype(np.int32))  # a C-contiguous copy, as the compiled loop reads it
    row_quarks = _quark_array(tuple(quarks))[dets.labels.numpy()]
    scores = np.ascontiguousarray(dets.scores.numpy(), dtype=np.float32)
    angles = None if dets.angles_rad is None else np.ascontiguousarray(dets.angles_rad.numpy(), dtype=np.float32)
    n = len(scores)
    ids = np.empty(n, dtype=np.uint32)
    failed = native.write_ods(native.api, rmeta, n, row_quarks.ctypes.data, xywh.ctypes.data, scores.ctypes.data,
                              None if angles is None else angles.ctypes.data, producer or 0, REL_CONTAIN,
                              ids.ctypes.data)
    if failed == n:
        raise MetaWriteError("add_one_cls_mtd failed for the producer record")
    if failed >= 0:
        raise MetaWriteError(f"add_od_mtd failed for label {int(dets.labels[failed])}")
    return ids.tolist(), row_quarks.tolist(), tuple(xywh[0].tolist()) if n else None


@functools.lru_cache(maxsize=64)
def _quark_array(quarks: tuple[int, ...]) -> npt.NDArray[np.uint32]:
    import numpy as np

    return np.array(quarks, dtype=np.uint32)


def _write_ods(lib: ctypes.PyDLL, rmeta: int, edges: Tensor, dets: Detections, quarks: Sequence[int],
               producer: int | None) -> _OdsWritten:
    """``write_detections``' ODMtds (and producer record) call by call, where the loop could not be compiled."""
    from inferstream.ops.boxes import xyxy_to_xywh

    boxes = xyxy_to_xywh(edges.int()).tolist()
    scores, labels = dets.scores.tolist(), dets.labels.tolist()
    angles = None if dets.angles_rad is None else dets.angles_rad.tolist()
    od = Mtd()
    ref = ctypes.byref(od)
    ids: list[int] = []
    if angles is None:
        add = lib.gst_analytics_relation_meta_add_od_mtd
        for (x, y, w, h), score, label in zip(boxes, scores, labels):
            if not add(rmeta, quarks[label], x, y, w, h, score, ref):
                raise MetaWriteError(f"add_od_mtd failed for label {label}")
            ids.append(od.id)
    else:
        add_oriented = lib.gst_analytics_relation_meta_add_oriented_od_mtd
        for (x, y, w, h), r, score, label in zip(boxes, angles, scores, labels):
            if not add_oriented(rmeta, quarks[label], x, y, w, h, r, score, ref):
                raise MetaWriteError(f"add_oriented_od_mtd failed for label {label}")
            ids.append(od.id)
    if producer is not None:  # recorded even without detections: "this producer looked at this frame"
        cls = Mtd()
        if not lib.gst_analytics_relation_meta_add_one_cls_mtd(rmeta, 1.0, producer, ctypes.byref(cls)):
            raise MetaWriteError("add_one_cls_mtd failed for the producer record")
        relate = lib.gst_analytics_relation_meta_set_relation
        for od_id in ids:
            relate(rmeta, REL_CONTAIN, cls.id, od_id)
    return ids, [quarks[label] for label in labels], boxes[0] if boxes else None


@functools.lru_cache(maxsize=256)
def _producer_id(producer: int) -> int | None:
    """The unique id in a producer quark's name (None: not one of ours)."""
    name = quark_name(producer)
    return int(name[len(PRODUCER_PREFIX):]) if name.startswith(PRODUCER_PREFIX) else None


@dataclass(frozen=True, slots=True)
class FrameMeta:
    """Detections read back from a buffer, with what Detections cannot hold.

    Attributes:
        dets: labels index into ``label_names`` (the per-buffer table of OD type names, first-seen order).
        label_names: the label strings.
        od_ids: the ODMtd id of each row.
        producers: the producer id of each row (-1 when not recorded).
        inferred_by: every producer recorded on the buffer, detections or not (a detector that skipped the frame
            is absent).
    """

    dets: Detections
    label_names: tuple[str, ...]
    od_ids: tuple[int, ...]
    producers: tuple[int, ...]
    inferred_by: frozenset[int]


def _by_type(rmeta: int) -> tuple[list[int], list[int], list[int]]:
    """Ids of the ODMtds, ClsMtds and TrackingMtds of a relation meta, in id order."""
    api = analytics()
    mtd_type = api.lib.gst_analytics_mtd_get_mtd_type
    handle = Mtd(0, rmeta)
    ref = ctypes.byref(handle)
    ods: list[int] = []
    clss: list[int] = []
    trks: list[int] = []
    lists = {api.od_type: ods, api.cls_type: clss, api.tracking_type: trks}
    for i in range(api.lib.gst_analytics_relation_get_length(rmeta)):
        handle.id = i
        found = lists.get(mtd_type(ref))
        if found is not None:
            found.append(i)
    return ods, clss, trks


def _producers_by_od(rmeta: int, ods: list[int], clss: list[int]) -> tuple[list[int], frozenset[int]]:
    """Producer id of each ODMtd (-1: none recorded) and every producer recorded on the buffer."""
    api = analytics()
    row_of = {od_id: row for row, od_id in enumerate(ods)}
    out = [-1] * len(ods)
    present = set()
    cls, od = Mtd(0, rmeta), Mtd()
    for cls_id in clss:
        cls.id = cls_id
        name = quark_name(api.lib.gst_analytics_cls_mtd_get_quark(ctypes.byref(cls), 0))
        if not name.startswith(PRODUCER_PREFIX):
            continue
        uid = int(name[len(PRODUCER_PREFIX):])
        present.add(uid)
        for od_id in _related(rmeta, cls_id, REL_CONTAIN, api.od_type, od):
            out[row_of[od_id]] = uid
    return out, frozenset(present)


def _related(rmeta: int, mtd_id: int, relation: int, mtd_type: int, out: Mtd) -> Iterator[int]:
    """Ids of the mtds of ``mtd_type`` that ``mtd_id`` relates to with ``relation`` (directed), in id order; ``out``
    is the handle of the one yielded last."""
    get = analytics().lib.gst_analytics_relation_meta_get_direct_related
    state = ctypes.c_void_p(None)
    state_ref, ref = ctypes.byref(state), ctypes.byref(out)
    while get(rmeta, mtd_id, relation, mtd_type, state_ref, ref):
        yield out.id


def _track_ids(rmeta: int, ods: list[int], trks: list[int]) -> list[int] | None:
    """Track id of each ODMtd (the first TrackingMtd it relates to; -1: untracked), None without TrackingMtds."""
    if not trks:
        return None
    api = analytics()
    info = api.lib.gst_analytics_tracking_mtd_get_info
    trk = Mtd()
    track_id, first, last, lost = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int()
    out = []
    for od_id in ods:
        if next(_related(rmeta, od_id, REL_RELATE_TO, api.tracking_type, trk), None) is None:
            out.append(-1)
            continue
        info(ctypes.byref(trk), ctypes.byref(track_id), ctypes.byref(first), ctypes.byref(last), ctypes.byref(lost))
        out.append(int(track_id.value))
    return out


def read_detections(buf: Gst.Buffer, unique_id: int | None = None) -> FrameMeta | None:
    """Read every ODMtd of ``buf`` (optionally only those of producer ``unique_id``); None without relation meta."""
    api = analytics()
    addr = buffer_address(buf)
    rmeta = api.lib.gst_buffer_get_analytics_relation_meta(addr)
    if not rmeta:
        return None
    written = handoff.take(addr, rmeta, api.lib.gst_analytics_relation_get_length(rmeta), buffer_pts(buf))
    if written is not None and (written.first_box is None
                                or _od_location(rmeta, written.od_ids[0]) == written.first_box):
        return _from_written(written, unique_id)
    ods, clss, trks = _by_type(rmeta)
    others = api.lib.gst_analytics_relation_get_length(rmeta) > len(ods) + len(clss) + len(trks)
    producers, present = _producers_by_od(rmeta, ods, clss)
    if unique_id is not None:
        keep = [i for i, p in enumerate(producers) if p == unique_id]
        ods, producers = [ods[i] for i in keep], [producers[i] for i in keep]
    names: dict[str, int] = {}
    rows: list[tuple[int, int, int, int, float, float]] = []
    labels: list[int] = []
    for row, type_quark in _od_rows(rmeta, ods):
        rows.append(row)
        labels.append(names.setdefault(quark_name(type_quark), len(names)))
    meta = _frame_meta(rows, labels, names, ods, producers, present, _track_ids(rmeta, ods, trks))
    if not others:
        return meta
    from inferstream.meta.instances import with_instances  # masks / keypoints: other mtd types are present

    return with_instances(rmeta, meta)


_THREAD = threading.local()


def _od_location(rmeta: int, od_id: int) -> tuple[int, int, int, int]:
    """``(x, y, w, h)`` of one ODMtd (the handoff's check, once per frame), through this thread's ctypes arguments:
    building them for each call cost more than the call."""
    args = getattr(_THREAD, "od_location", None)
    if args is None:
        od, values = Mtd(), (ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_float(),
                             ctypes.c_float())
        args = _THREAD.od_location = (od, values, (ctypes.byref(od), *(ctypes.byref(v) for v in values)))
    od, (x, y, w, h, _, _), refs = args
    od.id, od.meta = od_id, rmeta
    analytics().lib.gst_analytics_od_mtd_get_oriented_location(*refs)
    return x.value, y.value, w.value, h.value


def _od_rows(rmeta: int, ods: Sequence[int]) -> Iterator[tuple[tuple[int, int, int, int, float, float], int]]:
    """``(x, y, w, h, confidence, r)`` and the type quark of each ODMtd, as the C API stores them."""
    lib = analytics().lib
    od = Mtd(0, rmeta)
    ref = ctypes.byref(od)
    x, y, w, h, r, conf = (ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_float(),
                           ctypes.c_float())
    location_refs = tuple(ctypes.byref(v) for v in (x, y, w, h, r, conf))
    location, obj_type = lib.gst_analytics_od_mtd_get_oriented_location, lib.gst_analytics_od_mtd_get_obj_type
    for od_id in ods:
        od.id = od_id
        location(ref, *location_refs)
        yield (x.value, y.value, w.value, h.value, conf.value, r.value), obj_type(ref)


def _from_written(written: handoff.Written, unique_id: int | None) -> FrameMeta:
    """The FrameMeta a full read of the buffer would return, from what its writer left (``handoff``): the same
    values (the edges as written, float32 scores and angles) without building them again."""
    import numpy as np
    import torch

    from inferstream.detections import Detections

    producer = -1 if written.producer is None else written.producer
    total = len(written.od_ids)
    n = total if unique_id is None or unique_id == producer else 0
    quarks = written.label_quarks[:n]
    first_seen = {q: i for i, q in enumerate(dict.fromkeys(quarks))}  # label quark -> its first-seen index
    labels = np.fromiter(map(first_seen.__getitem__, quarks), dtype=np.int64, count=n)
    boxes, scores, angles = written.boxes_xyxy, written.scores, written.angles
    if n < total:
        boxes, scores, angles = boxes[:n], scores[:n], None if angles is None else angles[:n]
    dets = Detections.trusted(  # the writer's checked fields, their first n rows
        boxes_xyxy=boxes,
        scores=scores,
        labels=torch.from_numpy(labels).to(boxes.device),
        angles_rad=angles if angles is not None and bool((angles != 0).any()) else None,
    )
    present = frozenset() if written.producer is None else frozenset({written.producer})
    return FrameMeta(dets, tuple(map(quark_name, first_seen)), tuple(written.od_ids[:n]), (producer,) * n, present)


def _frame_meta(rows: list[tuple[int, int, int, int, float, float]], labels: list[int], names: dict[str, int],
                ods: list[int], producers: list[int], present: frozenset[int], tracks: list[int] | None) -> FrameMeta:
    import numpy as np
    import torch

    from inferstream.detections import Detections

    table = np.array(rows, dtype=np.float32).reshape(-1, 6)
    table[:, 2:4] += table[:, 0:2]  # x, y, w, h -> x1, y1, x2, y2
    boxes = torch.from_numpy(table)
    dets = Detections(
        boxes_xyxy=boxes[:, :4].contiguous(),
        scores=boxes[:, 4].contiguous(),
        labels=torch.tensor(labels, dtype=torch.int64),
        angles_rad=boxes[:, 5].contiguous() if bool((table[:, 5] != 0).any()) else None,
        track_ids=None if tracks is None else torch.tensor(tracks, dtype=torch.int64),
    )
    return FrameMeta(dets, tuple(names), tuple(ods), tuple(producers), present)
