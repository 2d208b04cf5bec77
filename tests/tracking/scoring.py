"""Score tracker output against a scene's ground truth with the standard libraries.

IDF1 / MOTA / ID switches come from motmetrics (given our own IoU distances: its ``iou_matrix`` breaks on
numpy 2), HOTA from trackeval when it is installed. A match needs IoU >= 0.5, as in MOTChallenge.
Oriented boxes are scored on their axis-aligned envelopes.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from inferstream.ops.boxes import rotated_envelope_xyxy
from inferstream.tracking.base import Tracker
from inferstream.tracking.geometry import iou_matrix_xyxy

from .scenes import Scene

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# One frame of tracker output: track ids [M] and their xyxy boxes [M, 4] (envelopes for oriented boxes).
FrameOutput = tuple[IntArray, FloatArray]


@dataclass(frozen=True, slots=True)
class Scores:
    hota: float | None  # mean HOTA over IoU thresholds 0.05..0.95 (trackeval), None without trackeval
    idf1: float
    mota: float
    id_switches: int
    false_positives: int
    misses: int


def _gt(scene: Scene) -> list[FrameOutput]:
    return [(f.gt_ids, rotated_envelope_xyxy(f.gt_boxes, f.gt_angles)) for f in scene.frames]


def score(scene: Scene, outputs: Sequence[FrameOutput], match_iou: float = 0.5) -> Scores:
    """Score one scene.

    Args:
        scene: the ground truth.
        outputs: one ``(ids [M], boxes_xyxy [M, 4])`` per frame, in frame order.
        match_iou: IoU a detection needs to count as its ground-truth object (CLEAR MOT and IDF1).
    """
    import motmetrics as mm

    gt = _gt(scene)
    if len(outputs) != len(gt):
        raise ValueError(f"expected {len(gt)} frames of output, got {len(outputs)}")
    acc = mm.MOTAccumulator(auto_id=True)
    for (gt_ids, gt_boxes), (ids, boxes) in zip(gt, outputs):
        iou = iou_matrix_xyxy(gt_boxes, boxes)
        dist = np.where(iou >= match_iou, 1.0 - iou, np.nan)
        acc.update(gt_ids.tolist(), np.asarray(ids).tolist(), dist)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        summary = mm.metrics.create().compute(
            acc, metrics=["idf1", "mota", "num_switches", "num_false_positives", "num_misses"], name="s")
    row = summary.loc["s"]
    return Scores(hota=hota(gt, outputs), idf1=float(row["idf1"]), mota=float(row["mota"]),
                  id_switches=int(row["num_switches"]), false_positives=int(row["num_false_positives"]),
                  misses=int(row["num_misses"]))


def hota(gt: Sequence[FrameOutput], outputs: Sequence[FrameOutput]) -> float | None:
    """Mean HOTA over trackeval's IoU thresholds, or None when trackeval is not installed."""
    try:
        from trackeval.metrics import HOTA
    except ImportError:
        return None
    gt_index = {int(i): k for k, i in enumerate(sorted({int(i) for ids, _ in gt for i in ids}))}
    tr_index = {int(i): k for k, i in enumerate(sorted({int(i) for ids, _ in outputs for i in ids}))}
    data = {
        "num_gt_dets": sum(len(ids) for ids, _ in gt),
        "num_tracker_dets": sum(len(ids) for ids, _ in outputs),
        "num_gt_ids": len(gt_index),
        "num_tracker_ids": len(tr_index),
        "gt_ids": [np.array([gt_index[int(i)] for i in ids], dtype=int) for ids, _ in gt],
        "tracker_ids": [np.array([tr_index[int(i)] for i in ids], dtype=int) for ids, _ in outputs],
        "similarity_scores": [iou_matrix_xyxy(g, t) for (_, g), (_, t) in zip(gt, outputs)],
    }
    res = HOTA().eval_sequence(data)
    return float(np.mean(res["HOTA"]))


def run_tracker(scene: Scene, tracker: Tracker, with_predicted: bool = False) -> list[FrameOutput]:
    """Feed every frame to ``tracker.update``; the output is each frame's detections that got a track id, and
    with ``with_predicted`` also the motion-model boxes of the tracks coasting without one (``TrackResult.predicted``:
    what pytracker writes with ``output-lost-tracks=true``)."""
    outputs: list[FrameOutput] = []
    for frame in scene.frames:
        result = tracker.update(frame.detections, frame.pts_ns)
        dets = result.detections
        assert dets.track_ids is not None
        ids = dets.track_ids.numpy()
        keep = ids >= 0
        out_ids, out_boxes = ids[keep], _envelopes(dets.boxes_xyxy.numpy()[keep], dets.angles_rad, keep)
        if with_predicted and len(result.predicted):
            p = result.predicted
            assert p.track_ids is not None
            out_ids = np.concatenate([out_ids, p.track_ids.numpy()])
            out_boxes = np.concatenate([out_boxes, _envelopes(p.boxes_xyxy.numpy(), p.angles_rad, None)])
        outputs.append((out_ids, out_boxes))
    return outputs


def _envelopes(boxes: FloatArray, angles_rad: torch.Tensor | None, keep: npt.NDArray[np.bool_] | None) -> FloatArray:
    angles = None if angles_rad is None else angles_rad.numpy() if keep is None else angles_rad.numpy()[keep]
    return rotated_envelope_xyxy(boxes, angles)
