"""pytracker in a real pipeline: stable ids on moving objects, one TrackingMtd per tracked ODMtd (no duplicated
boxes), predicted boxes on frames without detections, and untouched frames when there is nothing to track."""
from __future__ import annotations

import gi
import pytest
import torch

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import Gst, GstAnalytics
from gst_helpers import inject, run_pipeline

from inferstream.detections import Detections
from inferstream.meta.gstanalytics import label_quarks, producer_quark, read_detections, write_detections

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


# -- bad input: malformed detections, time going back, a flush -------------------------------------------------

def _walker_and_junk(buf: Gst.Buffer, i: int) -> None:
    """One walker, then three rows no tracker can use: a NaN box, a box of negative width, a NaN score."""
    nan = float("nan")
    boxes = torch.tensor([[10.0 + 5 * i, 50.0, 50.0 + 5 * i, 130.0], [nan, 10.0, 40.0, 60.0],
                          [200.0, 100.0, 180.0, 160.0], [100.0, 150.0, 140.0, 220.0]])
    dets = Detections(boxes_xyxy=boxes, scores=torch.tensor([0.9, 0.9, 0.9, nan]), labels=torch.zeros(4).long())
    write_detections(buf, dets, label_quarks(["person"]), producer_quark(1))


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # writing the NaN box as ODMtd ints
def test_pytracker_ignores_malformed_detections_with_one_warning() -> None:
    inject("junk", _walker_and_junk)
    result = run_pipeline(SRC.format(n=20) + " ! testinject name=junk ! pytracker name=trk min-hits=1 "
                          "output-lost-tracks=true ! fakesink", {"trk": _tracks})
    assert not result.errors
    assert len(result.warnings) == 1 and "untrackable detections ignored" in result.warnings[0]
    ids = [tuple(t[0]) for t in result.seen["trk"]]
    assert len(set(ids)) == 1 and ids[0][0] >= 0 and ids[0][1:] == (-1, -1, -1)  # only the walker is tracked
    assert all(n_od == 4 and n_trk == 1 for _, _, n_od, n_trk in result.seen["trk"])  # no predicted boxes


def _lost_boxes(buf: Gst.Buffer) -> tuple[list[int], int]:
    """(ids, number of predicted boxes: those whose producer is pytracker's unique-id 99)."""
    ids, producers, _, _ = _tracks(buf)
    return ids, producers.count(99)


def test_pytracker_resets_tracks_once_when_pts_go_back() -> None:
    def walkers_back_in_time(buf: Gst.Buffer, i: int) -> None:  # frame 15 restarts the clock and the walkers
        j = i if i < 15 else i - 15
        buf.pts = j * Gst.SECOND // 10
        _two_walkers(buf, j + (i >= 15) * 20)  # after the jump they are elsewhere: old tracks would coast

    inject("back", walkers_back_in_time)
    result = run_pipeline(SRC.format(n=30) + " ! testinject name=back ! pytracker name=trk min-hits=1 unique-id=99 "
                          "output-lost-tracks=true coast-time=1.0 ! fakesink", {"trk": _lost_boxes})
    assert not result.errors
    assert len(result.warnings) == 1 and "time went backwards, tracks reset" in result.warnings[0]
    seen = result.seen["trk"]
    before, after = set(seen[14][0]), set(seen[15][0])
    assert -1 not in before | after and not before & after  # new tracks after the jump ...
    assert all(n_predicted == 0 for _, n_predicted in seen)  # ... and the old ones did not coast on
    assert {tuple(s[0]) for s in seen[15:]} == {tuple(seen[15][0])}


def test_pytracker_flushing_seek_resets_tracks_without_a_warning() -> None:
    def walkers_by_time(buf: Gst.Buffer, i: int) -> None:
        _two_walkers(buf, round(buf.pts / (Gst.SECOND // 10)) + 20 * (i >= 12))  # elsewhere after the seek

    def seek_once(pipeline: Gst.Pipeline, msg: Gst.Message) -> None:
        if msg.type == Gst.MessageType.ELEMENT and msg.get_structure().get_name() == "seek-now":
            pipeline.seek_simple(Gst.Format.TIME, Gst.SeekFlags.FLUSH, 0)

    def ask_for_seek(buf: Gst.Buffer, i: int) -> None:
        walkers_by_time(buf, i)
        if i == 11:
            trk = pipeline_ref[0].get_by_name("trk")
            trk.post_message(Gst.Message.new_element(trk, Gst.Structure.new_empty("seek-now")))

    pipeline_ref: list[Gst.Pipeline] = []
    inject("seek", ask_for_seek)
    result = run_pipeline("videotestsrc pattern=black ! video/x-raw,format=RGB,width=320,height=240,framerate=10/1 "
                          "! testinject name=seek ! pytracker name=trk min-hits=1 unique-id=99 output-lost-tracks=true "
                          "coast-time=1.0 ! identity eos-after=30 ! fakesink",
                          {"trk": lambda buf: (buf.pts, *_lost_boxes(buf))}, on_message=seek_once,
                          before_play=pipeline_ref.append)
    assert not result.errors and not result.warnings
    seen = result.seen["trk"]
    restart = next(k for k in range(1, len(seen)) if seen[k][0] < seen[k - 1][0])  # the first frame after the flush
    old = {i for _, ids, _ in seen[:restart] for i in ids}
    assert all(ids and not old & set(ids) for _, ids, _ in seen[restart:])  # new tracks after the flush ...
    assert all(n_predicted == 0 for _, _, n_predicted in seen[restart:])  # ... and the old ones did not coast on
