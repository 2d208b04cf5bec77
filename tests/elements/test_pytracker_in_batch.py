"""pytracker linked right after a pyinfer tracks on the batch's thread (track-in-batch): the same tracks as when it
tracks in its own streaming thread, frames the detector skips included; with an element in between it tracks as
usual; a tracking failure is still pytracker's error. Real pipelines, a real detector (tests/blobs.py)."""
from __future__ import annotations

import gi
import pytest
from gst_helpers import run_pipeline
from scenes import feed, frame_index

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import Gst, GstAnalytics  # noqa: E402

from inferstream.meta.gstanalytics import read_detections  # noqa: E402

STREAMS = 3
SIZE = (320, 240)


def _tracked(buf: Gst.Buffer) -> tuple[int, list[int], list[list[float]], list[int]]:
    meta = read_detections(buf)
    assert meta is not None, "a frame without analytics meta"
    ids = meta.dets.track_ids.tolist() if meta.dets.track_ids is not None else [-1] * len(meta.dets)
    return frame_index(buf), ids, meta.dets.boxes_xyxy.tolist(), list(meta.producers)


def _tracking_mtds(buf: Gst.Buffer) -> int:
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    return 0 if rmeta is None else sum(1 for m in rmeta if isinstance(m, GstAnalytics.TrackingMtd))


def _run(tag: str, track_in_batch: bool, interval: int = 0, between: str = "") -> tuple[dict, dict]:
    """Per stream: what leaves pytracker (frame, ids, boxes, producers) and the TrackingMtds leaving pyinfer."""
    chains = [f"appsrc name=src{k} ! videoconvert ! video/x-raw,format=RGB ! pyinfer name=inf{k} "
              f"model=blobs:color_blob_detector model-family=yolo-end2end labels=red,green,blue input-size=320 "
              f"batch-group={tag} batch-size={STREAMS} max-latency=200 interval={interval} ! {between}"
              f"pytracker name=trk{k} min-hits=1 unique-id=77 track-in-batch={str(track_in_batch).lower()} ! "
              f"fakesink sync=false" for k in range(STREAMS)]
    probes = {f"trk{k}": _tracked for k in range(STREAMS)} | {f"inf{k}": _tracking_mtds for k in range(STREAMS)}

    def start(pipeline: Gst.Pipeline) -> None:
        for k in range(STREAMS):
            feed(pipeline.get_by_name(f"src{k}"), k, 30, *SIZE)

    result = run_pipeline("  ".join(chains), probes, timeout_s=120, before_play=start)
    assert result.eos and not result.errors, result.errors
    return ({k: result.seen[f"trk{k}"] for k in range(STREAMS)},
            {k: result.seen[f"inf{k}"] for k in range(STREAMS)})


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
