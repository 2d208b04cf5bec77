"""Behaviour and accuracy of tracking/bytetrack.py (and the tracking registry)."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from inferstream.detections import Detections
from inferstream.errors import ConfigError
from inferstream.tracking import TRACKERS, ByteTrack, TrackResult, make_tracker

from .scenes import SceneConfig, make_scene
from .scoring import run_tracker, score

FRAME_NS = 33_333_333  # 30 fps


def dets(boxes: Sequence[Sequence[float]], scores: Sequence[float] | None = None,
         labels: Sequence[int] | None = None, angles: Sequence[float] | None = None) -> Detections:
    n = len(boxes)
    return Detections(
        boxes_xyxy=torch.tensor(boxes, dtype=torch.float32).reshape(n, 4),
        scores=torch.tensor(scores if scores is not None else [0.9] * n, dtype=torch.float32),
        labels=torch.tensor(labels if labels is not None else [0] * n, dtype=torch.int64),
        angles_rad=None if angles is None else torch.tensor(angles, dtype=torch.float32),
    )


def box_at(cx: float, cy: float, w: float = 40.0, h: float = 80.0) -> list[float]:
    return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]


def ids_of(res: TrackResult) -> list[int]:
    assert res.detections.track_ids is not None
    return res.detections.track_ids.tolist()


def check_rows(res: TrackResult) -> None:
    """Every TrackState points at the row that carries its id."""
    assert res.detections.track_ids is not None and res.predicted.track_ids is not None
    for st in res.tracks:
        table = res.predicted if st.predicted else res.detections
        assert table.track_ids is not None
        assert int(table.track_ids[st.row]) == st.track_id
    assert [s.track_id for s in res.tracks] == sorted(s.track_id for s in res.tracks)


# -- behaviour -------------------------------------------------------------------------------------------------

def test_bytetrack_single_moving_object_keeps_one_id() -> None:
    tracker = ByteTrack()
    seen = [ids_of(tracker.update(dets([box_at(100 + 6 * f, 200 + 2 * f)]), f * FRAME_NS))[0] for f in range(60)]
    assert seen[0] == -1  # tentative until min_hits=2
    assert set(seen[1:]) == {1}


def test_bytetrack_min_hits_one_confirms_at_once() -> None:
    assert ids_of(ByteTrack(min_hits=1).update(dets([box_at(50, 50)]), 0)) == [1]


def test_bytetrack_crossing_objects_keep_their_ids() -> None:
    tracker = ByteTrack()
    by_object: dict[str, set[int]] = {"a": set(), "b": set()}
    for f in range(80):  # a moves right, b moves left; they overlap fully around f = 40
        a, b = box_at(200 + 10 * f, 300, 50, 100), box_at(1000 - 10 * f, 310, 60, 110)
        ids = ids_of(tracker.update(dets([a, b]), f * FRAME_NS))
        if f > 0:
            by_object["a"].add(ids[0])
            by_object["b"].add(ids[1])
    assert len(by_object["a"]) == 1 and len(by_object["b"]) == 1
    assert by_object["a"] != by_object["b"]


def test_bytetrack_missed_frames_do_not_break_the_id() -> None:
    tracker = ByteTrack()
    for f in range(10):
        tracker.update(dets([box_at(100 + 5 * f, 100)]), f * FRAME_NS)
    for f in range(10, 13):  # detector misses the object for three frames
        res = tracker.update(Detections.empty(), f * FRAME_NS)
        assert [(s.track_id, s.lost, s.predicted) for s in res.tracks] == [(1, True, True)]
        pred_cx = float(res.predicted.boxes_xyxy[0, [0, 2]].mean())
        assert pred_cx == pytest.approx(100 + 5 * f, abs=3.0)  # coasting on the motion model
        check_rows(res)
    assert ids_of(tracker.update(dets([box_at(100 + 5 * 13, 100)]), 13 * FRAME_NS)) == [1]


def test_bytetrack_low_score_detection_extends_but_never_starts_a_track() -> None:
    tracker = ByteTrack()
    for f in range(5):
        tracker.update(dets([box_at(100 + 5 * f, 100)]), f * FRAME_NS)
    # the object's score drops (partly hidden); a low-score clutter box elsewhere
    res = tracker.update(dets([box_at(125, 100), box_at(600, 400)], scores=[0.3, 0.3]), 5 * FRAME_NS)
    assert ids_of(res) == [1, -1]
    res = tracker.update(dets([box_at(130, 100), box_at(600, 400)], scores=[0.3, 0.3]), 6 * FRAME_NS)
    assert ids_of(res) == [1, -1]


def test_bytetrack_ids_are_unique_and_per_instance() -> None:
    a, b = ByteTrack(), ByteTrack()
    three = dets([box_at(100, 100), box_at(300, 100), box_at(500, 100)])
    for f in range(3):
        ids_a = ids_of(a.update(three, f * FRAME_NS))
    assert sorted(ids_a) == [1, 2, 3]
    ids_b = [ids_of(b.update(dets([box_at(100, 400)]), f * FRAME_NS)) for f in range(3)][-1]
    assert ids_b == [1]  # b's counter is its own: a's three tracks did not advance it
    b.reset()  # resetting b leaves a alone ...
    assert ids_of(a.update(three, 3 * FRAME_NS)) == ids_a
    a.reset()  # ... and a reset never reuses an id
    for f in range(2):
        after = ids_of(a.update(three, (10 + f) * FRAME_NS))
    assert sorted(after) == [4, 5, 6]


def test_bytetrack_first_id_gives_disjoint_ranges() -> None:
    a, b = ByteTrack(min_hits=1), ByteTrack(min_hits=1, first_id=1 << 32)
    d = dets([box_at(100, 100)])
    assert ids_of(a.update(d, 0)) == [1]
    assert ids_of(b.update(d, 0)) == [(1 << 32)]


def test_bytetrack_keeps_input_order_and_rows() -> None:
    boxes = [box_at(100, 100), box_at(400, 100), box_at(700, 100), box_at(400, 500)]
    tracker = ByteTrack()
    for f in range(3):
        ref = ids_of(tracker.update(dets(boxes), f * FRAME_NS))
    perm = [2, 0, 3, 1]
    shuffled = dets([boxes[i] for i in perm], scores=[0.9, 0.8, 0.7, 0.95])
    res = tracker.update(shuffled, 3 * FRAME_NS)
    assert ids_of(res) == [ref[i] for i in perm]
    assert res.detections.boxes_xyxy is shuffled.boxes_xyxy  # rows untouched, same tensors
    assert res.detections.scores is shuffled.scores
    check_rows(res)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy, on the NaNs
@pytest.mark.parametrize("oriented", [False, True])
def test_bytetrack_ignores_malformed_rows(oriented: bool) -> None:
    nan, inf = float("nan"), float("inf")
    tracker = ByteTrack()
    for f in range(30):
        walker = box_at(100 + 5 * f, 200)
        junk = [[nan, 10.0, 40.0, 60.0], [300.0, 100.0, 280.0, 160.0], [50.0, 50.0, inf, 90.0], box_at(500, 300),
                box_at(100 + 5 * f, 200)]  # NaN, negative width, infinite, NaN score, NaN angle (or a good twin)
        angles = [0.1, 0.0, 0.0, 0.0, 0.0, nan] if oriented else None
        res = tracker.update(dets([walker, *junk], scores=[0.9, 0.9, 0.9, 0.9, nan, 0.9], angles=angles), f * FRAME_NS)
        bad = 5 if oriented else 4
        assert res.malformed == bad
        assert ids_of(res)[1:bad + 1] == [-1] * bad
        assert np.isfinite(tracker._state.tracks.states).all()
    assert ids_of(res)[0] == 1 and [s.track_id for s in res.tracks] == ([1] if oriented else [1, 2])
    assert torch.isfinite(tracker.predict_only(30 * FRAME_NS).predicted.boxes_xyxy).all()


def test_bytetrack_empty_frames_age_and_end_tracks() -> None:
    tracker = ByteTrack(max_lost_s=0.5, coast_s=0.2)
    for f in range(5):
        tracker.update(dets([box_at(100, 100)]), f * FRAME_NS)
    states, ended = [], []
    for f in range(5, 40):
        res = tracker.update(Detections.empty(), f * FRAME_NS)
        states.append([(s.track_id, s.lost) for s in res.tracks])
        ended.extend(res.ended_ids)
    assert states[0] == [(1, True)]  # lost and reported while coasting
    assert states[-1] == []  # no longer reported after coast_s
    assert ended == [1]  # ended once, after max_lost_s
    for f in range(40, 42):
        res = tracker.update(dets([box_at(100, 100)]), f * FRAME_NS)
    assert ids_of(res) == [2]  # a new track, not the ended one


def test_bytetrack_track_state_times_are_pts() -> None:
    tracker = ByteTrack()
    t0 = 5_000_000_000
    for f in range(4):
        res = tracker.update(dets([box_at(100, 100)]), t0 + f * FRAME_NS)
    (st,) = res.tracks
    assert (st.first_seen_ns, st.last_seen_ns, st.lost, st.predicted) == (t0, t0 + 3 * FRAME_NS, False, False)
    res = tracker.update(Detections.empty(), t0 + 4 * FRAME_NS)
    assert res.tracks[0].last_seen_ns == t0 + 3 * FRAME_NS and res.tracks[0].lost


def test_bytetrack_predict_only_carries_boxes_forward_without_changing_state() -> None:
    tracker = ByteTrack()
    for f in range(10):  # 6 px per frame = 180 px/s to the right
        tracker.update(dets([box_at(100 + 6 * f, 100)]), f * FRAME_NS)
    first = tracker.predict_only(12 * FRAME_NS)
    again = tracker.predict_only(12 * FRAME_NS)
    assert len(first.detections) == 0 and first.detections.track_ids is not None
    (st,) = first.tracks
    assert (st.track_id, st.predicted, st.lost, st.row) == (1, True, False, 0)
    cx = float(first.predicted.boxes_xyxy[0, [0, 2]].mean())
    assert cx == pytest.approx(100 + 6 * 12, abs=2.0)
    assert torch.equal(first.predicted.boxes_xyxy, again.predicted.boxes_xyxy)
    assert first.predicted.scores.tolist() == pytest.approx([0.9])
    assert ids_of(tracker.update(dets([box_at(100 + 6 * 14, 100)]), 14 * FRAME_NS)) == [1]


def test_bytetrack_oriented_boxes_keep_angles() -> None:
    tracker = ByteTrack()
    for f in range(20):  # a long thin box (a vehicle seen from above) turning slowly
        angle = 0.6 + 0.02 * f
        d = dets([box_at(300 + 4 * f, 300, 200, 30), box_at(800, 500, 60, 60)], angles=[angle, 0.0])
        res = tracker.update(d, f * FRAME_NS)
        assert res.detections.angles_rad is d.angles_rad
    assert ids_of(res) == [1, 2]
    res = tracker.update(Detections.empty(oriented=True), 20 * FRAME_NS)
    assert res.predicted.angles_rad is not None
    assert res.predicted.angles_rad.tolist() == pytest.approx([0.6 + 0.02 * 19, 0.0])
    assert tracker.predict_only(21 * FRAME_NS).predicted.angles_rad is not None


def test_bytetrack_oriented_boxes_associate_on_their_envelope() -> None:
    # The unrotated box is 200x20; rotated by 90 degrees its envelope is 20x200. Detections of the rotated
    # object overlap the track only through the envelope.
    tracker = ByteTrack()
    for f in range(4):
        d = dets([box_at(300, 300, 200, 20)], angles=[np.pi / 2])
        ids = ids_of(tracker.update(d, f * FRAME_NS))
    assert ids == [1]
    res = tracker.update(dets([box_at(300, 300, 20, 200)], angles=[0.0]), 4 * FRAME_NS)
    assert ids_of(res) == [1]


@pytest.mark.parametrize(("per_class", "expected"), [(False, [1]), (True, [-1])])
def test_bytetrack_per_class_association(per_class: bool, expected: list[int]) -> None:
    tracker = ByteTrack(per_class=per_class)
    for f in range(3):
        ids = ids_of(tracker.update(dets([box_at(100, 100)], labels=[0]), f * FRAME_NS))
    assert ids == [1]  # the class-0 track formed: the class-1 detection below meets it
    res = tracker.update(dets([box_at(100, 100)], labels=[1]), 3 * FRAME_NS)
    assert ids_of(res) == expected


def test_bytetrack_output_ids_share_the_input_device_and_dtype() -> None:
    res = ByteTrack().update(dets([box_at(1, 1)]), 0)
    assert res.detections.track_ids is not None
    assert res.detections.track_ids.dtype == torch.int64
    assert res.detections.track_ids.device == res.detections.boxes_xyxy.device


def test_bytetrack_rows_point_at_their_tracks_in_a_busy_scene() -> None:
    scene = make_scene(3, SceneConfig(n_objects=12, n_frames=90))
    tracker = ByteTrack()
    for k, frame in enumerate(scene.frames):
        res = tracker.predict_only(frame.pts_ns) if k % 3 == 2 else tracker.update(frame.detections, frame.pts_ns)
        check_rows(res)


# -- errors and registry ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "match"), [
    ({"high_score": 1.5}, "high_score must be in"),
    ({"match_iou": -0.1}, "match_iou must be in"),
    ({"low_score": 0.6, "high_score": 0.5}, "must not exceed"),
    ({"max_lost_s": -1.0}, "max_lost_s"),
    ({"min_hits": 0}, "min_hits"),
    ({"first_id": -1}, "first_id"),
])
def test_bytetrack_rejects_bad_settings(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ByteTrack(**kwargs)  # type: ignore[arg-type]


def test_bytetrack_rejects_time_going_backwards() -> None:
    tracker = ByteTrack()
    tracker.update(dets([box_at(1, 1)]), 10 * FRAME_NS)
    with pytest.raises(ValueError, match="went backwards"):
        tracker.update(dets([box_at(1, 1)]), 5 * FRAME_NS)
    with pytest.raises(ValueError, match="went backwards"):
        tracker.predict_only(5 * FRAME_NS)
    with pytest.raises(ValueError, match="must be >= 0"):
        ByteTrack().update(dets([box_at(1, 1)]), -1)
    tracker.reset()  # after a seek
    tracker.update(dets([box_at(1, 1)]), 5 * FRAME_NS)


def test_make_tracker_builds_registered_trackers() -> None:
    tracker = make_tracker("bytetrack", min_hits=1, per_class=True)
    assert isinstance(tracker, ByteTrack) and tracker.settings.min_hits == 1 and tracker.settings.per_class
    assert "bytetrack" in TRACKERS


def test_make_tracker_rejects_unknown_names_and_settings() -> None:
    with pytest.raises(ConfigError, match=r"unknown tracker 'sort'; known: \['bytetrack'\]"):
        make_tracker("sort")
    with pytest.raises(ConfigError, match="accepted settings"):
        make_tracker("bytetrack", track_thresh=0.5)


def test_tracking_does_not_import_gi() -> None:
    code = "import inferstream.tracking, sys; print('gi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# -- accuracy against ground truth -----------------------------------------------------------------------------

# Floors a little below what was measured (noted on each row), on seeds the defaults were not tuned on.
# IDF1, MOTA and ID switches from motmetrics; HOTA from trackeval, checked when it is installed.
ACCURACY = [
    # (config, seeds, min mean IDF1, min mean MOTA, max ID switches in total, min mean HOTA)
    (SceneConfig(n_objects=8), (0, 1, 2), 0.87, 0.86, 12, 0.76),  # IDF1 0.896, MOTA 0.891, 8 sw., HOTA 0.790
    (SceneConfig(n_objects=20, fp_per_frame=2.0, n_frames=200), (0, 1), 0.86, 0.80, 8, 0.73),  # .890 .823 3 .754
    (SceneConfig(n_objects=8, fps=10.0, n_frames=150), (0, 1), 0.82, 0.81, 9, 0.72),  # .851 .834 5 .743
]


@pytest.mark.parametrize(("config", "seeds", "min_idf1", "min_mota", "max_switches", "min_hota"), ACCURACY)
def test_bytetrack_accuracy_on_synthetic_scenes(config: SceneConfig, seeds: tuple[int, ...], min_idf1: float,
                                                min_mota: float, max_switches: int, min_hota: float) -> None:
    results = [score(scene, run_tracker(scene, ByteTrack())) for scene in (make_scene(s, config) for s in seeds)]
    idf1 = float(np.mean([r.idf1 for r in results]))
    mota = float(np.mean([r.mota for r in results]))
    switches = sum(r.id_switches for r in results)
    assert idf1 >= min_idf1, idf1
    assert mota >= min_mota, mota
    assert switches <= max_switches, switches
    hotas = [r.hota for r in results]
    assert None not in hotas, "HOTA needs trackeval (the dev extra)"
    assert float(np.mean(hotas)) >= min_hota, hotas
