"""The tracking load the CPU benches share: ByteTrack with pytracker's default settings on a moving grid, steady
(every box found every frame) or flickering (as the GPU bench's random-weight model gives: boxes missed, jittered,
scored anywhere from 0.2 to 0.9, and false positives, so every ByteTrack stage and the Hungarian solver run)."""
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


def flicker_frame(n: int, frame: int, size: tuple[float, float] = (60.0, 80.0)) -> Detections:
    """``grid_frame`` with a fifth of the boxes missed, ±6 px of jitter, scores in [0.2, 0.9] and ``n // 10 + 1``
    false positives anywhere; the same frame gives the same boxes."""
    gen = torch.Generator().manual_seed(frame)
    grid = grid_frame(n, frame, size)
    kept = torch.rand(n, generator=gen) >= 0.2
    boxes = grid.boxes_xyxy[kept] + (torch.rand(int(kept.sum()), 4, generator=gen) - 0.5) * 12
    spurious = n // 10 + 1
    xy = torch.rand(spurious, 2, generator=gen) * torch.tensor([1200.0, 1000.0])
    boxes = torch.cat([boxes, torch.cat([xy, xy + torch.tensor(size)], dim=1)])
    scores = 0.2 + 0.7 * torch.rand(len(boxes), generator=gen)
    return Detections(boxes_xyxy=boxes, scores=scores, labels=torch.zeros(len(boxes), dtype=torch.int64))
