"""Write and read Detections as GstAnalytics metadata — the one place that knows its API and conventions.

Conventions (see DESIGN.md "Metadata contract"):
  * one ``GstAnalyticsRelationMeta`` per buffer (reused when upstream already attached one);
  * one ``ODMtd`` per detection: type quark = label string, confidence, box in the frame's pixels; oriented boxes use
    the oriented ODMtd (x, y = top-left of the unrotated box, ``r`` radians clockwise about the centre);
  * the producer (nvinfer's ``unique-id``) is recoverable: one ``ClsMtd`` per producer and buffer with quark
    ``inferstream/producer/<id>``, related ``CONTAIN`` to each ODMtd it produced;
  * tracking: a ``TrackingMtd`` related ``RELATE_TO`` from the ODMtd (what objectdetectionoverlay and ioutracker use).
Works with GStreamer 1.26 and 1.28 (only API present in both is used; ``rmeta.iterate``/``exist`` segfault in 1.26.2).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GLib", "2.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import GLib, Gst, GstAnalytics  # noqa: E402

from inferstream.errors import MetaWriteError  # noqa: E402

if TYPE_CHECKING:
    from inferstream.detections import Detections

PRODUCER_PREFIX = "inferstream/producer/"


def label_quarks(labels: Sequence[str]) -> list[int]:
    """Quarks for a model's label table; quarks are never freed, so only bounded label sets go here."""
    return [GLib.quark_from_string(name) for name in labels]


def producer_quark(unique_id: int) -> int:
    return GLib.quark_from_string(f"{PRODUCER_PREFIX}{unique_id}")


def relation_meta(buf: Gst.Buffer) -> GstAnalytics.RelationMeta:
    """The buffer's relation meta, added when absent (the buffer must be writable)."""
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    if rmeta is None:
        rmeta = GstAnalytics.buffer_add_analytics_relation_meta(buf)
    if rmeta is None:
        raise MetaWriteError("cannot add GstAnalyticsRelationMeta (buffer not writable?)")
    return rmeta


def write_detections(buf: Gst.Buffer, dets: Detections, quarks: Sequence[int], producer: int | None = None) -> list[int]:
    """Attach ``dets`` (CPU tensors, frame pixels) to ``buf``; returns the ODMtd ids in row order.

    Args:
        buf: a writable buffer.
        dets: detections in the frame's pixel space.
        quarks: label quark per class index (``label_quarks``).
        producer: the quark from ``producer_quark`` or None to not record the producer.
    """
    rmeta = relation_meta(buf)
    # ODMtd holds whole pixels: round the edges (not x and w separately) so each edge is off by at most 0.5 px
    edges = dets.boxes_xyxy.round()
    xywh = zip(edges[:, :2].int().tolist(), (edges[:, 2:] - edges[:, :2]).int().tolist())
    scores, labels = dets.scores.tolist(), dets.labels.tolist()
    ids: list[int] = []
    if dets.angles_rad is None:
        for ((x, y), (w, h)), score, label in zip(xywh, scores, labels):
            ok, od = rmeta.add_od_mtd(quarks[label], x, y, w, h, score)
            if not ok:
                raise MetaWriteError(f"add_od_mtd failed for label {label}")
            ids.append(od.id)
    else:
        for ((x, y), (w, h)), r, score, label in zip(xywh, dets.angles_rad.tolist(), scores, labels):
            ok, od = rmeta.add_oriented_od_mtd(quarks[label], x, y, w, h, r, score)
            if not ok:
                raise MetaWriteError(f"add_oriented_od_mtd failed for label {label}")
            ids.append(od.id)
    if producer is not None:  # recorded even without detections: "this producer looked at this frame"
        ok, cls = rmeta.add_one_cls_mtd(1.0, producer)
        if not ok:
            raise MetaWriteError("add_one_cls_mtd failed for the producer record")
        for od_id in ids:
            rmeta.set_relation(GstAnalytics.RelTypes.CONTAIN, cls.id, od_id)
    return ids


@dataclass(frozen=True, slots=True)
class TrackRecord:
    """What a TrackingMtd carries (ids and GstClockTime nanoseconds)."""

    od_id: int
    track_id: int
    first_seen_ns: int
    last_seen_ns: int
    lost: bool


def write_tracks(buf: Gst.Buffer, records: Sequence[TrackRecord]) -> None:
    """Add one TrackingMtd per record, related RELATE_TO from its ODMtd."""
    rmeta = relation_meta(buf)
    for rec in records:
        ok, trk = rmeta.add_tracking_mtd(rec.track_id, rec.first_seen_ns)
        if not ok:
            raise MetaWriteError(f"add_tracking_mtd failed for track {rec.track_id}")
        trk.update_last_seen(rec.last_seen_ns)
        if rec.lost:
            trk.set_lost()
        rmeta.set_relation(GstAnalytics.RelTypes.RELATE_TO, rec.od_id, trk.id)


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


def _producers_by_od(rmeta: GstAnalytics.RelationMeta, ods: list[GstAnalytics.ODMtd],
                     clss: list[GstAnalytics.ClsMtd]) -> tuple[list[int], frozenset[int]]:
    out = [-1] * len(ods)
    present = set()
    for cls in clss:
        name = GLib.quark_to_string(cls.get_quark(0)) or ""
        if not name.startswith(PRODUCER_PREFIX):
            continue
        uid = int(name[len(PRODUCER_PREFIX):])
        present.add(uid)
        for i, od in enumerate(ods):
            if rmeta.get_relation(cls.id, od.id) & GstAnalytics.RelTypes.CONTAIN:
                out[i] = uid
    return out, frozenset(present)


def _track_ids(rmeta: GstAnalytics.RelationMeta, ods: list[GstAnalytics.ODMtd],
               trks: list[GstAnalytics.TrackingMtd]) -> list[int] | None:
    if not trks:
        return None
    out = [-1] * len(ods)
    for i, od in enumerate(ods):
        for trk in trks:
            if rmeta.get_relation(od.id, trk.id) & GstAnalytics.RelTypes.RELATE_TO:
                out[i] = trk.get_info()[1]
                break
    return out


def read_detections(buf: Gst.Buffer, unique_id: int | None = None) -> FrameMeta | None:
    """Read every ODMtd of ``buf`` (optionally only those of producer ``unique_id``); None without relation meta."""
    import torch

    from inferstream.detections import Detections

    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    if rmeta is None:
        return None
    ods: list[GstAnalytics.ODMtd] = []
    clss: list[GstAnalytics.ClsMtd] = []
    trks: list[GstAnalytics.TrackingMtd] = []
    for mtd in rmeta:
        if isinstance(mtd, GstAnalytics.ODMtd):
            ods.append(mtd)
        elif isinstance(mtd, GstAnalytics.ClsMtd):
            clss.append(mtd)
        elif isinstance(mtd, GstAnalytics.TrackingMtd):
            trks.append(mtd)
    producers, present = _producers_by_od(rmeta, ods, clss)
    if unique_id is not None:
        keep = [i for i, p in enumerate(producers) if p == unique_id]
        ods, producers = [ods[i] for i in keep], [producers[i] for i in keep]
    names: dict[str, int] = {}
    rows: list[list[float]] = []
    labels: list[int] = []
    for od in ods:
        _, x, y, w, h, r, conf = od.get_oriented_location()
        rows.append([x, y, x + w, y + h, conf, r])
        labels.append(names.setdefault(GLib.quark_to_string(od.get_obj_type()), len(names)))
    table = torch.tensor(rows, dtype=torch.float32).reshape(-1, 6)
    tracks = _track_ids(rmeta, ods, trks)
    dets = Detections(
        boxes_xyxy=table[:, :4].contiguous(),
        scores=table[:, 4].contiguous(),
        labels=torch.tensor(labels, dtype=torch.int64),
        angles_rad=table[:, 5].contiguous() if bool((table[:, 5] != 0).any()) else None,
        track_ids=None if tracks is None else torch.tensor(tracks, dtype=torch.int64),
    )
    return FrameMeta(dets, tuple(names), tuple(od.id for od in ods), tuple(producers), present)
