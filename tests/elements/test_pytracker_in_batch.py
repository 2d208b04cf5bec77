"""pytracker linked right after a pyinfer tracks on the batch's thread (track-in-batch): the same tracks as when it
tracks in its own streaming thread, frames the detector skips included; the pytrackers of one batch track their
frames in one batched update (``update_streams``), with exactly the tracks of tracking frame by frame, on a
detector that flickers too; with an element in between it tracks as usual; a tracking failure, in a batch too, is
still the failing stream's pytracker's error. Real pipelines, real detectors (tests/blobs.py, ``FlickerDetector``)."""
from __future__ import annotations

import gi
import pytest
import torch
from gst_helpers import RunResult, run_pipeline
from scenes import feed, frame_index
from torch import nn

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import Gst, GstAnalytics

import inferstream.tracking
from inferstream.meta.gstanalytics import read_detections

STREAMS = 3
SIZE = (320, 240)
BLOBS = "model=blobs:color_blob_detector labels=red,green,blue"
FLICKER = "model=test_pytracker_in_batch:flicker_detector labels=a,b,c confidence-threshold=0.1"
OBJECTS = 14  # per FlickerDetector frame, before misses; plus false positives


class FlickerDetector(nn.Module):
    """Finds the scene's red square (tests/scenes.py: it moves 3 px right and 2 px down per frame, at a position
    unique to each stream) and reports OBJECTS boxes on a grid that moves with it, each missed, jittered and scored
    by a hash of the square's position (the same frame always gives the same boxes), plus two false positives.
    End-to-end layout (B, OBJECTS + 2, 6): x1, y1, x2, y2, score, class in input pixels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        red = (x[:, 0] > 0.6) & (x[:, 1:].amax(dim=1) < 0.35)  # [B, H, W]
        ys, xs = torch.arange(x.shape[2], dtype=x.dtype), torch.arange(x.shape[3], dtype=x.dtype)
        sx = torch.where(red.any(dim=1), xs, torch.tensor(1e4)).amin(dim=1)  # [B]
        sy = torch.where(red.any(dim=2), ys, torch.tensor(1e4)).amin(dim=1)
        k = torch.arange(OBJECTS + 2, dtype=x.dtype)

        def noise(salt: float) -> torch.Tensor:  # [B, K] in [0, 1)
            v = torch.sin(sx[:, None] * 12.9898 + sy[:, None] * 78.233 + k * 37.719 + salt) * 43758.5453
            return v - v.floor()

        cx = 20 + (k % 7) * 40 + sx[:, None] / 8 + (noise(1.0) - 0.5) * 6
        cy = 40 + (k // 7) * 60 + sy[:, None] / 8 + (noise(2.0) - 0.5) * 6
        cx[:, OBJECTS:], cy[:, OBJECTS:] = noise(3.0)[:, OBJECTS:] * 280 + 20, noise(4.0)[:, OBJECTS:] * 200 + 60
        score = (0.2 + 0.7 * noise(5.0)) * (noise(6.0) >= 0.2)  # a fifth missed (score 0: dropped)
        out = torch.stack([cx - 15, cy - 20, cx + 15, cy + 20, score, (k % 3).expand_as(cx)], dim=2)
        return out.to(x.dtype)


def flicker_detector() -> nn.Module:
    return FlickerDetector().eval()


def _tracked(buf: Gst.Buffer) -> tuple[int, list[int], list[list[float]], list[int]]:
    meta = read_detections(buf)
    if meta is None:  # a frame the detector skipped, with no track to predict
        return frame_index(buf), [], [], []
    ids = meta.dets.track_ids.tolist() if meta.dets.track_ids is not None else [-1] * len(meta.dets)
    return frame_index(buf), ids, meta.dets.boxes_xyxy.tolist(), list(meta.producers)


def _tracking_mtds(buf: Gst.Buffer) -> int:
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    return 0 if rmeta is None else sum(1 for m in rmeta if isinstance(m, GstAnalytics.TrackingMtd))


def _play(tag: str, track_in_batch: bool, interval: int = 0, between: str = "", detector: str = BLOBS,
          tracker: str = "min-hits=1 unique-id=77", streams: int = STREAMS, frames: int = 30) -> RunResult:
    """``streams`` x ``appsrc ! pyinfer (batch-group tag) ! [between] pytracker ! fakesink``, probed after pyinfer
    (``inf<k>``: TrackingMtds) and after pytracker (``trk<k>``: frame, ids, boxes, producers); stream k's ids
    start at 1000 k."""
    chains = [f"appsrc name=src{k} ! videoconvert ! video/x-raw,format=RGB ! pyinfer name=inf{k} {detector} "
              f"model-family=yolo-end2end input-size=320 batch-group={tag} batch-size={streams} max-latency=500 "
              f"interval={interval} ! {between}pytracker name=trk{k} first-id={1000 * k} {tracker} "
              f"track-in-batch={str(track_in_batch).lower()} ! fakesink sync=false" for k in range(streams)]
    probes = {f"trk{k}": _tracked for k in range(streams)} | {f"inf{k}": _tracking_mtds for k in range(streams)}

    def start(pipeline: Gst.Pipeline) -> None:
        for k in range(streams):
            feed(pipeline.get_by_name(f"src{k}"), k, frames, *SIZE)

    return run_pipeline("  ".join(chains), probes, timeout_s=120, before_play=start)


def _run(tag: str, track_in_batch: bool, interval: int = 0, between: str = "", **kw: object) -> tuple[dict, dict]:
    """Per stream: what leaves pytracker (frame, ids, boxes, producers) and the TrackingMtds leaving pyinfer."""
    result = _play(tag, track_in_batch, interval, between, **kw)  # type: ignore[arg-type]
    assert result.eos and not result.errors, result.errors
    streams = len(result.seen) // 2
    return ({k: result.seen[f"trk{k}"] for k in range(streams)},
            {k: result.seen[f"inf{k}"] for k in range(streams)})


@pytest.mark.parametrize("interval", [0, 1], ids=["every-frame", "every-other-frame"])
def test_tracking_in_the_batch_gives_the_tracks_of_tracking_in_the_stream(interval: int) -> None:
    in_batch, mtds_at_pyinfer = _run(f"inbatch{interval}", True, interval)
    in_stream, none_at_pyinfer = _run(f"instream{interval}", False, interval)
    assert in_batch == in_stream
    for k in range(STREAMS):
        seen = in_batch[k]
        assert [i for i, *_ in seen] == list(range(30)), f"stream {k} lost or reordered frames"
        ids = {i for _, frame_ids, _, _ in seen for i in frame_ids}
        assert -1 not in ids and len(seen[0][1]) == 1, f"stream {k}: one tracked square per frame, got {ids}"
        # frames inferred in the batch already carry their TrackingMtd when they leave pyinfer
        inferred = [n for i, n in enumerate(mtds_at_pyinfer[k]) if i % (interval + 1) == 0]
        assert inferred and all(n == 1 for n in inferred)
        assert not any(none_at_pyinfer[k])
        if interval:  # skipped frames: predicted by pytracker itself, under its own producer id
            assert all(p == [77] for i, _, _, p in seen if i % 2)


def test_with_an_element_in_between_pytracker_tracks_in_its_own_thread() -> None:
    queued, mtds_at_pyinfer = _run("queued", True, between="queue ! ")
    in_stream, _ = _run("queued-ref", False)
    assert queued == in_stream and not any(any(n) for n in mtds_at_pyinfer.values())


def test_a_tracking_failure_in_the_batch_is_pytrackers_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from inferstream.tracking.bytetrack import ByteTrack

    def fail(*_args: object) -> None:
        raise RuntimeError("tracker state corrupted")

    monkeypatch.setattr(ByteTrack, "update", fail)
    desc = ("appsrc name=src0 ! videoconvert ! video/x-raw,format=RGB ! pyinfer model=blobs:color_blob_detector "
            "model-family=yolo-end2end labels=red,green,blue input-size=320 ! pytracker name=trk0 ! fakesink")
    result = run_pipeline(desc, timeout_s=60, before_play=lambda p: feed(p.get_by_name("src0"), 0, 5, *SIZE))
    assert result.errors and "tracking failed" in result.errors[0] and "tracker state corrupted" in result.errors[0]
    assert "trk0" in result.errors[0]


def test_a_pytracker_tracked_in_the_batch_passes_its_buffers_through() -> None:
    """Its frames are tracked before they reach it: the base class pushes them without calling into Python
    (passthrough), and every frame still carries its track."""
    desc = ("appsrc name=src0 ! videoconvert ! video/x-raw,format=RGB ! pyinfer model=blobs:color_blob_detector "
            "model-family=yolo-end2end labels=red,green,blue input-size=320 in-flight=2 ! pytracker name=trk0 "
            "min-hits=1 ! fakesink sync=false")
    tracker: list[Gst.Element] = []

    def start(pipeline: Gst.Pipeline) -> None:
        tracker.append(pipeline.get_by_name("trk0"))
        feed(pipeline.get_by_name("src0"), 0, 12, *SIZE)

    result = run_pipeline(desc, {"trk0": lambda buf: (tracker[0].is_passthrough(), _tracked(buf)[1])},
                          timeout_s=60, before_play=start)
    assert result.eos and not result.errors, result.errors
    assert len(result.seen["trk0"]) == 12
    assert all(passthrough and len(ids) == 1 and ids[0] >= 1 for passthrough, ids in result.seen["trk0"])


def test_a_tracking_failure_mid_stream_with_two_frames_in_flight_is_reported_on_the_failed_frame(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """pytracker passes the frames before it through, leaves passthrough for the failed one and reports it."""
    from inferstream.tracking.bytetrack import ByteTrack

    update, calls = ByteTrack.update, [0]

    def third_fails(self: ByteTrack, *args: object) -> object:
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("tracker state corrupted")
        return update(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ByteTrack, "update", third_fails)
    desc = ("appsrc name=src0 ! videoconvert ! video/x-raw,format=RGB ! pyinfer model=blobs:color_blob_detector "
            "model-family=yolo-end2end labels=red,green,blue input-size=320 in-flight=2 ! pytracker name=trk0 "
            "! fakesink sync=false")
    result = run_pipeline(desc, {"trk0": frame_index}, timeout_s=60,
                          before_play=lambda p: feed(p.get_by_name("src0"), 0, 8, *SIZE))
    assert result.errors and "tracking failed" in result.errors[0] and "tracker state corrupted" in result.errors[0]
    assert result.seen["trk0"] == [0, 1], "the frames before the failed one pass, the failed one does not"


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many trackers each batched update took."""
    sizes: list[int] = []
    update_streams = inferstream.tracking.update_streams

    def spy(trackers, dets, pts_ns):  # type: ignore[no-untyped-def]
        sizes.append(len(trackers))
        return update_streams(trackers, dets, pts_ns)

    monkeypatch.setattr(inferstream.tracking, "update_streams", spy)
    return sizes


@pytest.mark.parametrize(("interval", "tracker"), [(0, ""), (1, ""), (0, "per-class=true min-hits=1")],
                         ids=["every-frame", "every-other-frame", "per-class"])
def test_a_batchs_pytrackers_track_together_with_the_tracks_of_tracking_frame_by_frame(
        batch_sizes: list[int], interval: int, tracker: str) -> None:
    streams, frames = 4, 40
    kw = {"detector": FLICKER, "streams": streams, "frames": frames,
          "tracker": f"{tracker} output-lost-tracks=true unique-id=77"}
    together, _ = _run(f"together{interval}{len(tracker)}", True, interval, **kw)
    assert batch_sizes and max(batch_sizes) == streams, "the streams' trackers never updated together"
    assert sum(batch_sizes) > streams * frames // (interval + 1) // 2, "most frames should track in a batch"
    frame_by_frame, _ = _run(f"alone{interval}{len(tracker)}", False, interval, **kw)
    assert together == frame_by_frame
    for k in range(streams):
        assert [i for i, *_ in together[k]] == list(range(frames)), f"stream {k} lost or reordered frames"
        assert len({i for _, ids, _, _ in together[k] for i in ids if i >= 0}) >= OBJECTS // 2


def test_a_failing_batch_is_the_failing_streams_pytracker_error(monkeypatch: pytest.MonkeyPatch,
                                                                 batch_sizes: list[int]) -> None:
    """The batched update fails whenever stream 2's tracker is in it; tracked frame by frame, only stream 2's
    tracker fails, so trk2 alone reports it."""
    from inferstream.tracking import bytetrack_native

    update = bytetrack_native.update  # what ByteTrack calls (numpy's core where no compiler exists)

    def broken_for_stream_2(cfg, streams, dets, pts_ns):  # type: ignore[no-untyped-def]
        if any(2000 <= s.next_id < 3000 for s in streams):
            raise RuntimeError("tracker of stream 2 corrupted")
        return update(cfg, streams, dets, pts_ns)

    monkeypatch.setattr(bytetrack_native, "update", broken_for_stream_2)
    result = _play("failing", True, detector=FLICKER, tracker="", streams=4, frames=5)
    assert batch_sizes, "no batched update was tried"
    assert result.errors and "tracking failed" in result.errors[0], result.errors
    assert "tracker of stream 2 corrupted" in result.errors[0] and "trk2" in result.errors[0]
