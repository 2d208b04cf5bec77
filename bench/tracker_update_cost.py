"""CPU cost of ByteTrack per frame: one ``update`` call at 5-100 detections (pytracker's per-frame cost), and 30
streams' frames updated one tracker after the other vs all at once with ``update_streams``.

    python bench/tracker_update_cost.py [--streams 30] [--repeats 5] [--one-stream-only] [--cores-only]

Every stream's pytracker tracks once per frame under one GIL, so at 16-32 streams this per-frame cost, not the GPU,
bounds the frame rate. Scenes (``_tracking_scene.py``): N boxes on a grid, each moving 2 px per frame, found every
frame with score 0.8 ("steady"), or missed, jittered, scored 0.2-0.9 and mixed with false positives ("flickering",
like the GPU bench's random-weight model, 31 boxes per frame there); 300 frames at 30 fps; the pytracker element's
default settings; each stream starts at another frame of the scene. Prints medians over the frames after the first
10; the batched and sequential runs alternate, ``--repeats`` times each, and the table gives their medians.
``--cores-only``: numpy's core (``bytetrack_core``) against the compiled one (``bytetrack_native``), alternating,
for a batch of 1, 8 (a GPU worker's batch) and ``--streams`` streams.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from _tracking_scene import FRAME_NS, default_bytetrack, flicker_frame, grid_frame

from inferstream.detections import Detections

FRAMES, WARMUP = 300, 10
Scene = Callable[[int, int], Detections]


def ms_per_update(n: int, scene: Scene) -> float:
    """Median milliseconds of one ``update`` with ``n`` detections of ``scene``."""
    frames = [scene(n, i) for i in range(FRAMES)]
    tr = default_bytetrack()
    times = []
    for i, dets in enumerate(frames):
        t0 = time.perf_counter()
        tr.update(dets, i * FRAME_NS)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[WARMUP:])


def ms_per_batch(n: int, scene: Scene, streams: int, batched: bool) -> float:
    """Median milliseconds to track one frame of each of ``streams`` streams (``n`` detections each)."""
    from inferstream.tracking import update_streams  # here: --one-stream-only also runs on code without it

    frames = [[scene(n, i + 7 * s) for s in range(streams)] for i in range(FRAMES)]
    trackers = [default_bytetrack() for _ in range(streams)]
    times = []
    for i, dets in enumerate(frames):
        pts = [i * FRAME_NS + s for s in range(streams)]  # the streams' clocks differ
        t0 = time.perf_counter()
        if batched:
            update_streams(trackers, dets, pts)
        else:
            for tr, d, p in zip(trackers, dets, pts):
                tr.update(d, p)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times[WARMUP:])


@contextmanager
def numpy_core(on: bool) -> Iterator[None]:
    """ByteTrack on numpy's core (as where no C compiler exists) while ``on``."""
    from inferstream.tracking import bytetrack_native

    compiled = bytetrack_native._lib
    if on:
        bytetrack_native._lib = lambda: None  # type: ignore[assignment]
    try:
        yield
    finally:
        bytetrack_native._lib = compiled  # type: ignore[method-assign]


def compare_cores(streams: list[int], repeats: int) -> None:
    from inferstream.tracking import bytetrack_native

    assert bytetrack_native.available(), "no C compiler: the compiled core cannot be built here"
    print(f"numpy's core against the compiled one (ms per batch of one frame per stream, median of {repeats} "
          f"alternating runs)\n")
    print("| streams | scene | detections | numpy | compiled | speed-up |\n|---|---|---|---|---|---|")
    for n_streams in streams:
        for name, scene in (("steady", grid_frame), ("flickering", flicker_frame)):
            for n in (5, 31, 100):
                runs: dict[bool, list[float]] = {False: [], True: []}
                for _ in range(repeats):
                    for on_numpy in (True, False):
                        with numpy_core(on_numpy):
                            runs[on_numpy].append(ms_per_batch(n, scene, n_streams, True))
                slow, fast = statistics.median(runs[True]), statistics.median(runs[False])
                print(f"| {n_streams} | {name} | {n} | {slow:.3f} | {fast:.3f} | {slow / fast:.1f}x |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--one-stream-only", action="store_true", help="only the first table (one update per call)")
    ap.add_argument("--cores-only", action="store_true", help="only numpy's core against the compiled one")
    args = ap.parse_args()
    if args.cores_only:
        compare_cores([1, 8, args.streams], args.repeats)
        return
    print("| detections | steady (ms per update) | flickering (ms per update) |\n|---|---|---|")
    for n in (5, 20, 31, 100):
        print(f"| {n} | {ms_per_update(n, grid_frame):.3f} | {ms_per_update(n, flicker_frame):.3f} |", flush=True)
    if args.one_stream_only:
        return
    print(f"\n{args.streams} streams, one frame each (ms per batch, median of {args.repeats} alternating runs)\n")
    print("| scene | detections | one tracker after the other | update_streams | speed-up |\n|---|---|---|---|---|")
    for name, scene in (("steady", grid_frame), ("flickering", flicker_frame)):
        for n in (5, 20, 31):
            runs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                for batched in (False, True):
                    runs[batched].append(ms_per_batch(n, scene, args.streams, batched))
            seq, bat = statistics.median(runs[False]), statistics.median(runs[True])
            print(f"| {name} | {n} | {seq:.3f} | {bat:.3f} | {seq / bat:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
