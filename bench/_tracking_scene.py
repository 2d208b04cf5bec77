"""The tracking load the CPU benches share: ByteTrack with pytracker's default settings on a moving grid."""
from __future__ import annotations

import torch

from inferstream.detections import Detections
from inferstream.tracking import Tracker, make_tracker

FRAME_NS = 33_333_333  # 30 fps


def default_bytetrack() -> Tracker:
    """ByteTrack as the pytracker element makes it by default."""
    return make_tracker("bytetrack", high_score=0.5, low_score=0.1, new_track_score=0.6, match_iou=0.2,
                        max_lost_s=2.0, coast_s=0.2, min_hits=2, per_class=False, first_id=1)


def grid_frame(n: int, frame: int, size: tuple[float, float] = (60.0, 80.0)) -> Detections:
    """Frame ``frame`` of ``n`` boxes of ``size`` (w, h) on a grid, 10 per row, each moving 2 px per frame."""
    idx = torch.arange(n, dtype=torch.float32)
    xy = torch.stack([(idx % 10) * 120.0, (idx // 10) * 100.0], dim=1) + 10.0 + 2.0 * frame
    return Detections(boxes_xyxy=torch.cat([xy, xy + torch.tensor(size)], dim=1), scores=torch.full((n,), 0.8),
                      labels=torch.zeros(n, dtype=torch.int64))
