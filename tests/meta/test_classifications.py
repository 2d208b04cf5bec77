"""meta.classifications on real buffers: written ClsMtds are related from their ODMtd and read back with their
producer and classifier-type; the stock GstAnalytics API sees the same relations."""
from __future__ import annotations

import gi
import torch

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import GLib, Gst, GstAnalytics

from inferstream.detections import Detections
from inferstream.meta.classifications import (
    Classification,
    producer_record_quarks,
    read_classifications,
    write_classifications,
)
from inferstream.meta.gstanalytics import label_quarks, producer_quark, read_detections, write_detections

Gst.init(None)


def test_classifications_round_trip_with_producer_and_type() -> None:
    buf = Gst.Buffer.new()
    dets = Detections(boxes_xyxy=torch.tensor([[0.0, 0, 10, 10], [5, 5, 20, 30], [1, 1, 4, 4]]),
                      scores=torch.tensor([0.9, 0.8, 0.7]), labels=torch.tensor([0, 0, 1]))
    ods = write_detections(buf, dets, label_quarks(["person", "car"]), producer_quark(1))
    quarks = label_quarks(["red", "blue"])
    write_classifications(buf, ods[:2], [1, 0], [0.75, 0.5], quarks, producer_record_quarks(7, "color"))
    write_classifications(buf, ods[1:2], [0], [0.25], quarks)  # no producer recorded
    meta = read_detections(buf)
    assert meta is not None and meta.producers == (1, 1, 1)
    got = read_classifications(buf, meta.od_ids)
    assert got == [(Classification("blue", 0.75, 7, "color"),),
                   (Classification("red", 0.5, 7, "color"), Classification("red", 0.25, -1, "")), ()]
    # the stock API: the first object's ClsMtd is related RELATE_TO from its ODMtd
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    ok, od = rmeta.get_od_mtd(meta.od_ids[0])
    assert ok
    if hasattr(od, "iter_direct_related"):  # 1.28's pythonic API: every related ClsMtd
        related = list(od.iter_direct_related(GstAnalytics.RelTypes.RELATE_TO, GstAnalytics.ClsMtd))
    else:  # 1.26 (Debian 13): the C call, which returns the first (passing its state back trips PyGObject)
        found, _state, mtd = rmeta.get_direct_related(od.id, GstAnalytics.RelTypes.RELATE_TO,
                                                      GstAnalytics.ClsMtd.get_mtd_type(), 0)
        related = [rmeta.get_cls_mtd(mtd.id)[1]] if found else []
    assert [GLib.quark_to_string(c.get_quark(0)) for c in related] == ["blue"]


def test_read_classifications_of_a_buffer_without_any() -> None:
    buf = Gst.Buffer.new()
    dets = Detections(boxes_xyxy=torch.tensor([[0.0, 0, 10, 10]]), scores=torch.tensor([0.9]),
                      labels=torch.tensor([0]))
    ods = write_detections(buf, dets, label_quarks(["person"]), producer_quark(1))
    assert read_classifications(buf, ods) == [()]
    assert read_classifications(Gst.Buffer.new(), [0]) == [()]
