"""meta/gstanalytics.py: write Detections to a buffer and read the same values back (no pipeline needed)."""
from __future__ import annotations

import gi
import pytest
import torch

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import GLib, Gst, GstAnalytics

from inferstream.detections import Detections
from inferstream.meta.gstanalytics import label_quarks, producer_quark, read_detections, write_detections
from inferstream.meta.tracks import TrackRecord, write_tracks

Gst.init(None)


@pytest.fixture(autouse=True, params=["compiled loops", "python loops"])
def writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with the compiled per-frame loops and with the Python ones they replace where no C compiler
    exists."""
    from inferstream.meta import gstanalytics, tracks
    from inferstream.native import analytics as native_analytics

    if request.param == "python loops":
        monkeypatch.setattr(gstanalytics, "loops", lambda: None)
        monkeypatch.setattr(tracks, "loops", lambda: None)
    elif native_analytics.loops() is None:
        pytest.skip("no C compiler here")
    return str(request.param)


def _dets(oriented: bool = False) -> Detections:
    return Detections(
        boxes_xyxy=torch.tensor([[10.0, 20.0, 110.0, 70.0], [600.0, 400.0, 800.0, 500.0]]),
        scores=torch.tensor([0.9, 0.4]),
        labels=torch.tensor([1, 0]),
        angles_rad=torch.tensor([0.0, 0.785]) if oriented else None,
    )


def test_write_detections_roundtrip_axis_aligned() -> None:
    buf = Gst.Buffer.new_allocate(None, 16, None)
    ids = write_detections(buf, _dets(), label_quarks(["person", "car"]), producer_quark(7))
    meta = read_detections(buf)
    assert meta is not None and len(ids) == 2 and meta.od_ids == tuple(ids)
    torch.testing.assert_close(meta.dets.boxes_xyxy, _dets().boxes_xyxy)
    torch.testing.assert_close(meta.dets.scores, _dets().scores)
    assert [meta.label_names[i] for i in meta.dets.labels.tolist()] == ["car", "person"]
    assert meta.producers == (7, 7) and meta.dets.angles_rad is None


def test_write_detections_oriented_matches_upstream_golden_vector() -> None:
    """(600, 400, 200, 100, 0.785) must give the envelope (594, 344, 212, 212) — gst-python's test_analytics."""
    buf = Gst.Buffer.new_allocate(None, 16, None)
    write_detections(buf, _dets(oriented=True), label_quarks(["a", "b"]))
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    ods = [m for m in rmeta if isinstance(m, GstAnalytics.ODMtd)]
    location = ods[1].get_location()
    assert tuple(location[1:5]) == (594, 344, 212, 212)
    meta = read_detections(buf)
    assert meta is not None and meta.dets.angles_rad is not None
    assert abs(meta.dets.angles_rad[1].item() - 0.785) < 1e-6
    torch.testing.assert_close(meta.dets.boxes_xyxy[1], torch.tensor([600.0, 400.0, 800.0, 500.0]))


def test_read_detections_filters_by_producer_and_reads_tracks() -> None:
    buf = Gst.Buffer.new_allocate(None, 16, None)
    q = label_quarks(["a", "b"])
    first = write_detections(buf, _dets(), q, producer_quark(1))
    write_detections(buf, _dets()[:1], q, producer_quark(2))
    write_tracks(buf, [TrackRecord(first[0], 42, 1000, 2000, False)])
    only_two = read_detections(buf, unique_id=2)
    assert only_two is not None and len(only_two.dets) == 1
    everything = read_detections(buf)
    assert everything is not None and len(everything.dets) == 3
    assert everything.dets.track_ids is not None and everything.dets.track_ids.tolist() == [42, -1, -1]
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    trk = next(m for m in rmeta if isinstance(m, GstAnalytics.TrackingMtd))
    assert trk.get_info()[1:4] == (42, 1000, 2000)


def test_read_detections_without_meta_is_none() -> None:
    assert read_detections(Gst.Buffer.new_allocate(None, 16, None)) is None


def test_label_quarks_are_the_label_strings() -> None:
    assert [GLib.quark_to_string(q) for q in label_quarks(["person", "bus"])] == ["person", "bus"]


def test_read_detections_reads_metadata_written_through_pygobject() -> None:
    """The reader goes through ctypes: it must see what any other writer (here PyGObject) attached, relations
    included, and ignore mtd types it does not know."""
    buf = Gst.Buffer.new_allocate(None, 16, None)
    rmeta = GstAnalytics.buffer_add_analytics_relation_meta(buf)
    _, od_a = rmeta.add_od_mtd(GLib.quark_from_string("dog"), 5, 6, 30, 40, 0.75)
    _, od_b = rmeta.add_oriented_od_mtd(GLib.quark_from_string("ship"), 100, 50, 80, 20, 0.5, 0.6)
    _, other_cls = rmeta.add_one_cls_mtd(0.3, GLib.quark_from_string("not-a-producer"))
    _, producer = rmeta.add_one_cls_mtd(1.0, producer_quark(3))
    rmeta.set_relation(GstAnalytics.RelTypes.CONTAIN, producer.id, od_b.id)
    rmeta.set_relation(GstAnalytics.RelTypes.CONTAIN, other_cls.id, od_a.id)
    _, trk = rmeta.add_tracking_mtd(77, 5)
    rmeta.set_relation(GstAnalytics.RelTypes.RELATE_TO, od_b.id, trk.id)
    meta = read_detections(buf)
    assert meta is not None and meta.od_ids == (od_a.id, od_b.id)
    assert meta.label_names == ("dog", "ship") and meta.dets.labels.tolist() == [0, 1]
    torch.testing.assert_close(meta.dets.boxes_xyxy, torch.tensor([[5.0, 6.0, 35.0, 46.0], [100.0, 50.0, 180.0, 70.0]]))
    torch.testing.assert_close(meta.dets.scores, torch.tensor([0.75, 0.6]))
    assert meta.dets.angles_rad is not None and abs(meta.dets.angles_rad[1].item() - 0.5) < 1e-6
    assert meta.producers == (-1, 3) and meta.inferred_by == frozenset({3})
    assert meta.dets.track_ids is not None and meta.dets.track_ids.tolist() == [-1, 77]
    only_three = read_detections(buf, unique_id=3)
    assert only_three is not None and only_three.od_ids == (od_b.id,)



def _dump(buf: Gst.Buffer) -> list[tuple[object, ...]]:
    """Every mtd of the buffer's relation meta through PyGObject: type, values and relations."""
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    out: list[tuple[object, ...]] = []
    for m in rmeta:
        if isinstance(m, GstAnalytics.ODMtd):
            values: tuple[object, ...] = ("od", GLib.quark_to_string(m.get_obj_type()),
                                          *m.get_oriented_location()[1:6], round(m.get_oriented_location()[6], 6))
        elif isinstance(m, GstAnalytics.TrackingMtd):
            values = ("track", *m.get_info()[1:])
        else:
            values = ("cls", GLib.quark_to_string(m.get_quark(0)))
        related = tuple(rmeta.get_relation(m.id, other.id) for other in rmeta)
        out.append((m.id, *values, related))
    return out


@pytest.mark.parametrize("writer", ["compiled loops"], indirect=True)  # it switches to the Python loops itself
@pytest.mark.parametrize("oriented", [False, True])
def test_compiled_and_python_loops_write_the_same_metadata(oriented: bool, writer: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from inferstream.meta import gstanalytics, tracks

    g = torch.Generator().manual_seed(3)
    xy, wh = torch.rand(25, 2, generator=g) * 1800, torch.rand(25, 2, generator=g) * 90 + 1
    dets = Detections(boxes_xyxy=torch.cat([xy, xy + wh], 1), scores=torch.rand(25, generator=g),
                      labels=torch.randint(0, 3, (25,), generator=g),
                      angles_rad=torch.rand(25, generator=g) if oriented else None)
    quarks = label_quarks(["a", "b", "c"])

    def write() -> Gst.Buffer:
        buf = Gst.Buffer.new_allocate(None, 16, None)
        ids = write_detections(buf, dets, quarks, producer_quark(4))
        write_tracks(buf, [TrackRecord(od, 100 + i, 10 * i, 10 * i + 5, i % 3 == 0) for i, od in enumerate(ids)])
        return buf

    first = _dump(write())
    monkeypatch.setattr(gstanalytics, "loops", lambda: None)
    monkeypatch.setattr(tracks, "loops", lambda: None)
    assert first == _dump(write()) and len(first) == 25 + 1 + 25
    assert sum(1 for m in first if m[1] == "track" and m[-2]) == 9  # lost flags: rows 0, 3, ..., 24
