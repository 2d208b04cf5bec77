"""runner.tracking on real Gst.Buffers with real GstAnalytics meta (no pipeline): a stage seated on a batch group's
stream and tracked in batches (``track_batch``) writes exactly the tracks of a stage tracking each buffer itself;
a failure is kept for the element; the offer / seat bookkeeping. Reference: the same ByteTrack run frame by frame."""
from __future__ import annotations

import gi
import pytest
import torch

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.batching import BatchGroup
from inferstream.detections import Detections
from inferstream.inference import InferConfig, ModelStep
from inferstream.meta.gstanalytics import label_quarks, producer_quark, read_detections, write_detections
from inferstream.runner.tracking import TrackStage, offer, offered_at, seat, track_batch, withdraw
from inferstream.tracking import make_tracker

Gst.init(None)
FRAME_NS = 33_333_333


def _stage(first_id: int = 1) -> tuple[TrackStage, list[tuple[str, str]]]:
    warnings: list[tuple[str, str]] = []
    stage = TrackStage(make_tracker("bytetrack", min_hits=1, first_id=first_id), operate_on=None, output_lost=False,
                       unique_id=77, worker=None, warn=lambda kind, exc, text: warnings.append((kind, text)))
    return stage, warnings


def _buffer(i: int, shift: float) -> Gst.Buffer:
    """Frame ``i``: three boxes moving right by 4 px a frame, written as a detector writes them."""
    buf = Gst.Buffer.new()
    buf.pts = i * FRAME_NS
    x = torch.tensor([20.0, 120.0, 220.0]) + 4 * i + shift
    boxes = torch.stack([x, torch.full((3,), 40.0), x + 30, torch.full((3,), 100.0)], dim=1)
    dets = Detections(boxes, torch.tensor([0.9, 0.8, 0.95]), torch.tensor([0, 1, 0]))
    write_detections(buf, dets, label_quarks(["a", "b"]), producer_quark(1))
    return buf


def _ids(buf: Gst.Buffer) -> list[int]:
    meta = read_detections(buf)
    assert meta is not None and meta.dets.track_ids is not None
    return meta.dets.track_ids.tolist()


def test_tracking_in_batches_gives_the_tracks_of_tracking_each_buffer() -> None:
    alone = [_stage(1)[0], _stage(1000)[0]]
    batched = [_stage(1)[0], _stage(1000)[0]]
    for i in range(12):
        own = [_buffer(i, 0.0), _buffer(i, 7.0)]
        together = [_buffer(i, 0.0), _buffer(i, 7.0)]
        for stage, buf in zip(alone, own):
            stage.track(buf)
        track_batch(list(zip(batched, together)))
        assert [_ids(b) for b in together] == [_ids(b) for b in own]
    assert sorted(_ids(together[0])) == [1, 2, 3] and sorted(_ids(together[1])) == [1000, 1001, 1002]
    assert all(s.take_error() is None for s in batched)


def test_a_failure_in_a_batch_is_kept_for_its_stage_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferstream.tracking import bytetrack_native

    good, bad = _stage(1)[0], _stage(1000)[0]
    update = bytetrack_native.update  # what ByteTrack calls (numpy's core where no compiler exists)

    def broken_for_bad(cfg, streams, dets, pts_ns):  # type: ignore[no-untyped-def]
        if any(s.next_id >= 1000 for s in streams):  # the batched update, and then bad's own
            raise RuntimeError("tracker state corrupted")
        return update(cfg, streams, dets, pts_ns)

    monkeypatch.setattr(bytetrack_native, "update", broken_for_bad)
    bufs = [_buffer(0, 0.0), _buffer(0, 7.0)]
    track_batch([(good, bufs[0]), (bad, bufs[1])])
    error = bad.take_error()
    assert isinstance(error, RuntimeError) and "corrupted" in str(error)
    assert bad.take_error() is None and good.take_error() is None  # reported once, and only by its stage
    assert sorted(_ids(bufs[0])) == [1, 2, 3]  # the other stream was tracked all the same
    bad.track_seated(_buffer(1, 7.0))  # a frame in no batch (e.g. skipped by interval): the same
    assert isinstance(bad.take_error(), RuntimeError)


def test_time_going_back_resets_the_tracks_and_warns_once() -> None:
    stage, warnings = _stage()
    for i in (0, 1, 2, 0, 1):
        stage.track(_buffer(i, 0.0))
    assert warnings == [("pts", "the stream's time went backwards, tracks reset")]


def test_an_offered_stage_is_seated_on_the_stream_of_the_pad_it_was_offered_at() -> None:
    cfg = InferConfig(model="blobs:color_blob_detector", family="yolo-end2end", precision="fp32")
    group = BatchGroup("seat", cfg, ModelStep(cfg), batch_size=1, max_latency_s=1.0)
    member = group.join()
    stage, _ = _stage()
    pad = Gst.Pad.new("sink", Gst.PadDirection.SINK)  # a pytracker's sink pad
    offer(pad, stage)
    assert offered_at(pad) is stage and offered_at(Gst.Pad.new("other", Gst.PadDirection.SINK)) is None
    seat(stage, member)
    assert stage.seated and member.tracker is stage
    withdraw(pad)  # the pytracker stops: its frames are no longer tracked in the batch
    assert not stage.seated and member.tracker is None and offered_at(pad) is None


def test_a_buffer_that_refuses_its_tracks_fails_its_stage_and_the_batch_writes_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's TrackingMtds go out in one call; the one buffer whose relation meta cannot be had (as for a
    buffer that is not writable) is its stage's failure, and the buffers before and after it get their tracks."""
    from inferstream.errors import MetaWriteError
    from inferstream.meta import tracks
    from inferstream.native.gst import buffer_address

    stages = [_stage(1000 * k + 1)[0] for k in range(4)]
    for i in range(2):  # min_hits=1: every box has an id from the first frame on
        bufs = [_buffer(i, 9.0 * k) for k in range(4)]
        refusing = buffer_address(bufs[2]) if i == 1 else None
        relation_meta = tracks._relation_meta

        def flaky(buf: Gst.Buffer, _refusing: int | None = refusing, _real=relation_meta) -> int:  # type: ignore[no-untyped-def]
            if buffer_address(buf) == _refusing:
                raise MetaWriteError("cannot add GstAnalyticsRelationMeta (buffer not writable?)")
            return _real(buf)

        monkeypatch.setattr(tracks, "_relation_meta", flaky)
        track_batch(list(zip(stages, bufs)))
        monkeypatch.setattr(tracks, "_relation_meta", relation_meta)
    errors = [s.take_error() for s in stages]
    assert isinstance(errors[2], MetaWriteError) and "not writable" in str(errors[2])
    assert errors[0] is None and errors[1] is None and errors[3] is None
    for k in (0, 1, 3):
        assert sorted(_ids(bufs[k])) == [1000 * k + 1, 1000 * k + 2, 1000 * k + 3]
    meta = read_detections(bufs[2])
    assert meta is not None and meta.dets.track_ids is None  # no TrackingMtd at all, not half of them
