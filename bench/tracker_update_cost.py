"""CPU cost of one ``ByteTrack.update`` call at 5, 20 and 100 detections (pytracker's per-frame cost).

    python bench/tracker_update_cost.py

Every stream's pytracker calls ``update`` once per frame under one GIL, so at 16-32 streams this per-call cost,
not the GPU, bounds the frame rate. Scene: N boxes on a grid, each moving 2 px per frame, score 0.8, 300 frames
at 30 fps; the pytracker element's default settings. Prints the median over the frames after the first 10.
"""
from __future__ import annotations

import statistics
import time

from _tracking_scene import FRAME_NS, default_bytetrack, grid_frame

FRAMES, WARMUP = 300, 10


def ms_per_update(n: int) -> float:
    """Median milliseconds of one ``update`` with ``n`` detections."""
    tr = default_bytetrack()
    times = []
    for i in range(FRAMES):
        dets = grid_frame(n, i)
        t0 = time.perf_counter()
        tr.update(dets, i * FRAME_NS)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[WARMUP:])


def main() -> None:
    for n in (5, 20, 100):
        print(f"{n:4d} detections: {ms_per_update(n):.3f} ms per update")


if __name__ == "__main__":
    main()
