"""meta/handoff.py: a read right after a write returns what a full read of the buffer returns, and a buffer whose
metadata changed in between is read in full."""
from __future__ import annotations

import dataclasses

import gi
import pytest
import torch

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.detections import Detections
from inferstream.meta import gstanalytics as ga
from inferstream.meta import handoff
from inferstream.meta.tracks import TrackRecord, write_tracks
from inferstream.native.analytics import analytics
from inferstream.native.gst import buffer_address

Gst.init(None)
QUARKS = ga.label_quarks(["person", "car", "bus"])


def _dets(n: int, oriented: bool) -> Detections:
    gen = torch.Generator().manual_seed(n)
    xy = torch.rand(n, 2, generator=gen) * 500
    return Detections(boxes_xyxy=torch.cat([xy, xy + 10 + torch.rand(n, 2, generator=gen) * 90], dim=1),
                      scores=torch.rand(n, generator=gen), labels=torch.randint(0, 3, (n,), generator=gen),
                      angles_rad=torch.rand(n, generator=gen) - 0.5 if oriented else None)


def _buffer(pts: int = 1000) -> Gst.Buffer:
    buf = Gst.Buffer.new_allocate(None, 16, None)
    buf.pts = pts
    return buf


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per read: whether the handoff served it."""
    seen: list[bool] = []
    real = handoff.take

    def spy(*args: object) -> handoff.Written | None:
        out = real(*args)  # type: ignore[arg-type]
        seen.append(out is not None)
        return out

    monkeypatch.setattr(handoff, "take", spy)
    handoff.clear()
    return seen


def _assert_same(a: ga.FrameMeta | None, b: ga.FrameMeta | None) -> None:
    assert a is not None and b is not None
    for field in dataclasses.fields(Detections):
        x, y = getattr(a.dets, field.name), getattr(b.dets, field.name)
        assert (x is None) == (y is None), field.name
        if x is not None:
            assert x.dtype == y.dtype and torch.equal(x, y), field.name
    assert (a.label_names, a.od_ids, a.producers, a.inferred_by) == (b.label_names, b.od_ids, b.producers,
                                                                      b.inferred_by)


@pytest.mark.parametrize(("n", "oriented", "producer", "unique_id"), [
    (20, False, 7, None), (20, True, None, None), (5, False, 7, 7), (5, False, 7, 8), (0, False, 7, None),
    (3, True, 2, 2)])
def test_a_read_after_a_write_equals_a_full_read(taken: list[bool], n: int, oriented: bool, producer: int | None,
                                                 unique_id: int | None) -> None:
    dets, quark = _dets(n, oriented), None if producer is None else ga.producer_quark(producer)
    full_buf = _buffer()
    ga.write_detections(full_buf, dets, QUARKS, quark)
    handoff.clear()
    full = ga.read_detections(full_buf, unique_id=unique_id)
    buf = _buffer()
    ga.write_detections(buf, dets, QUARKS, quark)
    _assert_same(ga.read_detections(buf, unique_id=unique_id), full)
    assert taken == [False, True]
    _assert_same(ga.read_detections(buf, unique_id=unique_id), full)  # taken once: the next read is a full one
    assert taken == [False, True, False]


def test_metadata_added_in_between_is_read_in_full(taken: list[bool]) -> None:
    buf = _buffer()
    ids = ga.write_detections(buf, _dets(4, False), QUARKS, ga.producer_quark(1))
    write_tracks(buf, [TrackRecord(ids[2], 42, 0, 1000, False)])
    meta = ga.read_detections(buf)
    assert taken == [False] and meta is not None and meta.dets.track_ids is not None
    assert meta.dets.track_ids.tolist() == [-1, -1, 42, -1]


def test_a_second_writer_leaves_nothing(taken: list[bool]) -> None:
    buf = _buffer()
    ga.write_detections(buf, _dets(3, False), QUARKS, ga.producer_quark(1))
    ga.write_detections(buf, _dets(2, False), QUARKS, ga.producer_quark(2))  # the meta already had entries
    meta = ga.read_detections(buf)
    assert taken == [False] and meta is not None and meta.producers == (1, 1, 1, 2, 2)


def test_a_stale_entry_with_another_first_box_is_ignored(taken: list[bool]) -> None:
    buf = _buffer()
    ga.write_detections(buf, _dets(3, False), QUARKS, ga.producer_quark(1))
    expected = ga.read_detections(buf)
    rmeta = analytics().lib.gst_buffer_get_analytics_relation_meta(buffer_address(buf))
    written = handoff.Written(rmeta, 4, 1000, torch.tensor([[1.0, 2.0, 4.0, 6.0]] * 3), torch.full((3,), 0.5), None,
                              QUARKS[:3], [0, 1, 2], 1, (1, 2, 3, 4))
    handoff.leave(buffer_address(buf), written)  # what a recycled buffer could meet: all but the boxes match
    _assert_same(ga.read_detections(buf), expected)
    assert taken == [True, True]
