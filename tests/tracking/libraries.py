"""Other projects' trackers run on a scene's detections, for side-by-side scoring (tests and bench).

Each runner feeds a whole scene to a fresh tracker and returns, per frame, what ``scoring.run_tracker`` returns
for ours: the frame's detections that the tracker gave an id, with those ids (norfair: the objects it matched to
a detection of this frame, at that detection's box). Same detections, same kind of output, same scoring.
Libraries: norfair (``pip install --no-deps norfair==2.3.0``: its metadata pins numpy < 2) and Roboflow's
``trackers`` (the ``dev`` extra); ``./setup`` installs both.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from inferstream.tracking import ByteTrack

from .scenes import Scene
from .scoring import FrameOutput, Scores, run_tracker, score

# A runner feeds a scene to a fresh tracker; with a list, it appends each update's seconds to it.
Runner = Callable[[Scene, "list[float] | None"], list[FrameOutput]]


def roboflow(cls_name: str, **params: Any) -> Runner:
    """A runner for ``trackers.<cls_name>`` (ByteTrackTracker, SORTTracker, OCSORTTracker) with ``params``."""

    def run(scene: Scene, times: list[float] | None = None) -> list[FrameOutput]:
        import supervision as sv
        import trackers

        tracker = getattr(trackers, cls_name)(frame_rate=scene.config.fps, **params)
        outputs: list[FrameOutput] = []
        for frame in scene.frames:
            d = frame.detections
            sv_dets = sv.Detections(xyxy=d.boxes_xyxy.numpy().astype(np.float32), confidence=d.scores.numpy(),
                                    class_id=d.labels.numpy())
            t0 = time.perf_counter()
            res = tracker.update(sv_dets)
            if times is not None:
                times.append(time.perf_counter() - t0)
            keep = res.tracker_id >= 0
            outputs.append((res.tracker_id[keep].astype(np.int64), res.xyxy[keep].astype(np.float64)))
        return outputs

    return run


def norfair_iou(min_score: float = 0.3, distance_threshold: float = 0.7, hit_counter_s: float = 1.0,
                initialization_delay: int = 1, estimates: bool = False) -> Runner:
    """A runner for norfair with its IoU distance; detections below ``min_score`` are dropped before it (it has
    no score-aware association), and ``hit_counter_s`` is its track lifetime in seconds. ``estimates``: output
    every object norfair reports, at its Kalman estimate (objects coasting without a detection included)."""

    def run(scene: Scene, times: list[float] | None = None) -> list[FrameOutput]:
        import norfair

        hit_max = max(2, round(hit_counter_s * scene.config.fps))
        tracker = norfair.Tracker(distance_function="iou", distance_threshold=distance_threshold,
                                  hit_counter_max=hit_max, initialization_delay=min(initialization_delay, hit_max - 1))
        outputs: list[FrameOutput] = []
        for k, frame in enumerate(scene.frames):
            boxes, scores = frame.detections.boxes_xyxy.numpy().astype(np.float64), frame.detections.scores.numpy()
            t0 = time.perf_counter()
            dets = [norfair.Detection(points=boxes[i].reshape(2, 2), scores=np.full(2, scores[i]), data=(k, i))
                    for i in np.flatnonzero(scores >= min_score)]
            objs = tracker.update(detections=dets)
            if times is not None:
                times.append(time.perf_counter() - t0)
            if estimates:
                out = np.array([o.estimate.reshape(4) for o in objs]).reshape(-1, 4)
            else:
                objs = [o for o in objs if o.last_detection is not None and o.last_detection.data[0] == k]
                out = boxes[[o.last_detection.data[1] for o in objs]].reshape(-1, 4)
            outputs.append((np.array([o.id for o in objs], dtype=np.int64), out))
        return outputs

    return run


# The libraries at the settings bench/tracking_compare.py's grid search picked for them (OC-SORT: its defaults).
# ON_DETECTIONS give ids to the frame's detections; COASTING also report objects without a detection this frame.
ON_DETECTIONS: dict[str, Runner] = {
    "trackers ByteTrack": roboflow("ByteTrackTracker", track_activation_threshold=0.6, high_conf_det_threshold=0.6,
                                   minimum_iou_threshold=0.1, lost_track_buffer=60),
    "trackers SORT": roboflow("SORTTracker", track_activation_threshold=0.3, minimum_iou_threshold=0.3,
                              lost_track_buffer=60),
    "trackers OC-SORT": roboflow("OCSORTTracker"),
    "norfair (matched)": norfair_iou(),
}
COASTING: dict[str, Runner] = {"norfair (estimates)": norfair_iou(estimates=True)}


def score_all(scene: Scene) -> dict[str, Scores]:
    """Every library's scores on ``scene``, and ours with default settings: "pytracker" (ids on detections) and
    "pytracker + coasting" (with ``TrackResult.predicted``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the libraries' deprecation notices
        out = {lib: score(scene, run(scene, None)) for lib, run in {**ON_DETECTIONS, **COASTING}.items()}
    out["pytracker"] = score(scene, run_tracker(scene, ByteTrack()))
    out["pytracker + coasting"] = score(scene, run_tracker(scene, ByteTrack(), with_predicted=True))
    return out
