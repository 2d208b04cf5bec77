"""pytracker in a real pipeline: stable ids on moving objects, one TrackingMtd per tracked ODMtd (no duplicated
boxes), predicted boxes on frames without detections, and untouched frames when there is nothing to track."""
from __future__ import annotations

import gi
import pytest
import torch

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import Gst, GstAnalytics  # noqa: E402
from gst_helpers import inject, run_pipeline  # noqa: E402

from inferstream.detections import Detections  # noqa: E402
from inferstream.meta.gstanalytics import label_quarks, producer_quark, read_detections, write_detections  # noqa: E402

SRC = "videotestsrc pattern=black num-buffers={n} ! video/x-raw,format=RGB,width=320,height=240,framerate=10/1"


def _two_walkers(buf: Gst.Buffer, i: int, skip_every: int = 0) -> None:
    """Two boxes moving in opposite directions; with skip_every=k, every k-th frame carries no meta at all."""
    if skip_every and i % skip_every == skip_every - 1:
        return
    boxes = torch.tensor([[10.0 + 5 * i, 50.0, 50.0 + 5 * i, 130.0], [260.0 - 5 * i, 120.0, 300.0 - 5 * i, 200.0]])
    dets = Detections(boxes_xyxy=boxes, scores=torch.tensor([0.9, 0.85]), labels=torch.tensor([0, 0]))
    write_detections(buf, dets, label_quarks(["person"]), producer_quark(1))


def _tracks(buf: Gst.Buffer) -> tuple[list[int], list[int], int, int]:
    meta = read_detections(buf)
    if meta is None:
        return [], [], 0, 0
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    n_trk = sum(1 for m in rmeta if isinstance(m, GstAnalytics.TrackingMtd))
    ids = meta.dets.track_ids.tolist() if meta.dets.track_ids is not None else [-1] * len(meta.dets)
    return ids, list(meta.producers), len(meta.dets), n_trk


@pytest.mark.parametrize("shared_thread", ["true", "false"])
def test_pytracker_ids_stable_and_one_tracking_mtd_per_box(shared_thread: str) -> None:
    inject("walk", _two_walkers)
    result = run_pipeline(SRC.format(n=30) + f" ! testinject name=walk ! pytracker name=trk min-hits=1 "
                          f"shared-thread={shared_thread} ! fakesink", {"trk": _tracks})
    assert not result.errors
    seen = result.seen["trk"]
    assert all(n_od == 2 for _, _, n_od, _ in seen)  # no duplicated boxes
    ids = [tuple(i) for i, _, _, _ in seen]
    assert len(set(ids)) == 1 and -1 not in ids[0] and len(set(ids[0])) == 2
    assert all(n_trk == 2 for *_, n_trk in seen)


def test_pytracker_predicts_boxes_on_frames_without_detections() -> None:
    inject("walk3", lambda buf, i: _two_walkers(buf, i, skip_every=3))
    result = run_pipeline(SRC.format(n=30) + " ! testinject name=walk3 ! pytracker name=trk min-hits=1 "
                          "unique-id=99 ! fakesink", {"trk": _tracks})
    assert not result.errors
    seen = result.seen["trk"]
    real_ids = set(seen[0][0])
    for i, (ids, producers, n_od, _) in enumerate(seen):
        if i % 3 == 2:  # a skipped frame: the two tracks, predicted, marked with the tracker's producer id
            assert n_od == 2 and producers == [99, 99] and set(ids) == real_ids
        else:
            assert producers == [1, 1] and set(ids) == real_ids


def test_pytracker_frames_without_meta_pass_untouched_before_any_track() -> None:
    result = run_pipeline(SRC.format(n=5) + " ! pytracker name=trk ! fakesink", {"trk": read_detections})
    assert not result.errors and len(result.seen["trk"]) == 5
    assert all(m is None or len(m.dets) == 0 for m in result.seen["trk"])


def test_pytracker_rejects_unknown_algorithm() -> None:
    result = run_pipeline(SRC.format(n=1) + " ! pytracker algorithm=nosuch ! fakesink")
    assert result.errors and "nosuch" in result.errors[0]


def _one_hides(buf: Gst.Buffer, i: int) -> None:
    """Both walkers; the second is missed by the detector on frames 10 and 11."""
    _two_walkers(buf, i) if i not in (10, 11) else write_detections(
        buf, Detections(boxes_xyxy=torch.tensor([[10.0 + 5 * i, 50.0, 50.0 + 5 * i, 130.0]]),
                        scores=torch.tensor([0.9]), labels=torch.tensor([0])),
        label_quarks(["person"]), producer_quark(1))


def _lost_flags(buf: Gst.Buffer) -> tuple[list[int], list[bool]]:
    meta = read_detections(buf)
    rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
    lost = [m.get_info()[4] for m in rmeta if isinstance(m, GstAnalytics.TrackingMtd)]
    return list(meta.producers), lost


def test_pytracker_output_lost_tracks_reports_coasting_boxes() -> None:
    inject("hide", _one_hides)
    result = run_pipeline(SRC.format(n=16) + " ! testinject name=hide ! pytracker name=trk min-hits=1 unique-id=99 "
                          "output-lost-tracks=true coast-time=0.5 ! fakesink", {"trk": _lost_flags})
    assert not result.errors
    producers, lost = result.seen["trk"][10]
    assert producers == [1, 99] and sorted(lost) == [False, True]
    assert result.seen["trk"][9] == ([1, 1], [False, False])


def test_pytrackers_of_several_streams_on_the_shared_thread_keep_their_streams_apart() -> None:
    """Four streams, one shared tracking thread: every stream gets its own two stable ids, from its own range."""
    chains = [SRC.format(n=20) + f" ! testinject name=walk{i} ! pytracker name=trk{i} min-hits=1 first-id={100 * i} "
              "! fakesink" for i in range(4)]
    for i in range(4):
        inject(f"walk{i}", _two_walkers)
    result = run_pipeline("  ".join(chains), {f"trk{i}": _tracks for i in range(4)})
    assert not result.errors
    for i in range(4):
        ids = {tuple(t[0]) for t in result.seen[f"trk{i}"]}
        assert len(ids) == 1 and all(100 * i <= t < 100 * i + 100 for t in next(iter(ids))), (i, ids)
