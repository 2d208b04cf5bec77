"""CPU cost of one ``ByteTrack.update`` call at 5, 20 and 100 detections (pytracker's per-frame cost).

    python bench/tracker_update_cost.py

Every stream's pytracker calls ``update`` once per frame under one GIL, so at 16-32 streams this per-call cost,
not the GPU, bounds the frame rate. Scene: N boxes on a grid, each moving 2 px per frame, score 0.8, 300 frames
at 30 fps; the pytracker element's default settings. Prints the median over the frames after the first 10.
"""
from __future__ import annotations

import statistics
import time

import torch

from inferstream.detections import Detections
from inferstream.tracking import make_tracker

FRAMES, WARMUP, FRAME_NS = 300, 10, 33_333_333


def ms_per_update(n: int) -> float:
    """Median milliseconds of one ``update`` with ``n`` detections."""
    tr = make_tracker("bytetrack", high_score=0.5, low_score=0.1, new_track_score=0.6, match_iou=0.2,
                      max_lost_s=2.0, coast_s=0.2, min_hits=2, per_class=False, first_id=1)
    idx = torch.arange(n, dtype=torch.float32)
    origin = torch.stack([(idx % 10) * 120.0, (idx // 10) * 100.0], dim=1) + 10.0
    size = torch.tensor([60.0, 80.0])
    scores, labels = torch.full((n,), 0.8), torch.zeros(n, dtype=torch.int64)
    times = []
    for i in range(FRAMES):
        xy = origin + 2.0 * i
        dets = Detections(boxes_xyxy=torch.cat([xy, xy + size], dim=1), scores=scores, labels=labels)
        t0 = time.perf_counter()
        tr.update(dets, i * FRAME_NS)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[WARMUP:])


def main() -> None:
    for n in (5, 20, 100):
        print(f"{n:4d} detections: {ms_per_update(n):.3f} ms per update")


if __name__ == "__main__":
    main()
