"""CPU cost of one ``ByteTrack.update`` call at 5, 20, 31 and 100 detections (pytracker's per-frame cost).

    python bench/tracker_update_cost.py

Every stream's pytracker calls ``update`` once per frame under one GIL, so at 16-32 streams this per-call cost,
not the GPU, bounds the frame rate. Scenes (``_tracking_scene.py``): N boxes on a grid, each moving 2 px per frame,
found every frame with score 0.8 ("steady"), or missed, jittered, scored 0.2-0.9 and mixed with false positives
("flickering", like the GPU bench's random-weight model, 31 boxes per frame there); 300 frames at 30 fps; the
pytracker element's default settings. Prints the median over the frames after the first 10.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from _tracking_scene import FRAME_NS, default_bytetrack, flicker_frame, grid_frame

from inferstream.detections import Detections

FRAMES, WARMUP = 300, 10


def ms_per_update(n: int, scene: Callable[[int, int], Detections]) -> float:
    """Median milliseconds of one ``update`` with ``n`` detections of ``scene``."""
    tr = default_bytetrack()
    times = []
    for i in range(FRAMES):
        dets = scene(n, i)
        t0 = time.perf_counter()
        tr.update(dets, i * FRAME_NS)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[WARMUP:])


def main() -> None:
    print("| detections | steady (ms per update) | flickering (ms per update) |\n|---|---|---|")
    for n in (5, 20, 31, 100):
        print(f"| {n} | {ms_per_update(n, grid_frame):.3f} | {ms_per_update(n, flicker_frame):.3f} |")


if __name__ == "__main__":
    main()
