"""Host cost of tracking one batch in a GPU worker's place (CPU): the runner's ``track_batch`` on real buffers.

    python bench/track_batch_cost.py [--streams 8] [--boxes 31] [--frames 300]
    PYTHONPATH=<other tree>/src:$PYTHONPATH python bench/track_batch_cost.py   # the same on another tree

A GPU worker of the app's ``auto`` layout runs 8 streams in batches of 8, and with pytracker the batch's thread
tracks every frame of the batch right after pyinfer wrote its detections (``runner.tracking.track_batch``): read
them back (the writer's handoff), ``update_streams``, write the TrackingMtds. That is what this times, per batch,
with parts apart (observe: the reads, update: the trackers, write: the rest, the TrackingMtds). Detections are the flickering
scene the GPU bench's random-weight model resembles (``_tracking_scene.flicker_frame``), written per frame with
``write_detections`` as pyinfer does (not timed). Medians over the frames after the first 10.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import gi

gi.require_version("Gst", "1.0")
from _tracking_scene import FRAME_NS, default_bytetrack, flicker_frame
from gi.repository import Gst

from inferstream import tracking
from inferstream.meta.gstanalytics import label_quarks, producer_quark, write_detections
from inferstream.runner import tracking as runner_tracking

WARMUP = 10


def timing(spent: dict[str, float], part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            spent[part] += time.perf_counter() - t0
    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--boxes", type=int, default=31)
    ap.add_argument("--frames", type=int, default=300)
    args = ap.parse_args()
    Gst.init(None)
    stages = [runner_tracking.TrackStage(default_bytetrack(), operate_on=None, output_lost=False, unique_id=99,
                                         worker=None, warn=lambda *_: None) for _ in range(args.streams)]
    quarks, producer = label_quarks(["person"]), producer_quark(1)
    scenes = [[flicker_frame(args.boxes, i + 7 * s) for s in range(args.streams)] for i in range(args.frames)]
    spent = {"observe": 0.0, "update": 0.0}  # within the current batch
    tracking.update_streams = timing(spent, "update", tracking.update_streams)  # type: ignore[assignment]
    runner_tracking.TrackStage.observe = timing(spent, "observe", runner_tracking.TrackStage.observe)  # type: ignore[method-assign]
    rows: list[tuple[float, float, float]] = []  # per batch: the whole, observe, update
    for i, frames in enumerate(scenes):
        buffers = []
        for s, dets in enumerate(frames):
            buf = Gst.Buffer.new_allocate(None, 16, None)
            buf.pts = i * FRAME_NS + s
            write_detections(buf, dets, quarks, producer)
            buffers.append(buf)
        spent.update(observe=0.0, update=0.0)
        t0 = time.perf_counter()
        runner_tracking.track_batch(list(zip(stages, buffers)))
        rows.append((time.perf_counter() - t0, spent["observe"], spent["update"]))
        for stage in stages:
            if (error := stage.take_error()) is not None:
                raise error
    whole, observe, update = (1e3 * statistics.median(column[WARMUP:]) for column in zip(*rows))
    write = 1e3 * statistics.median([w - o - u for w, o, u in rows[WARMUP:]])
    print(f"{args.streams} streams x {args.boxes} flickering boxes: track_batch {whole:.3f} ms per batch (observe "
          f"{observe:.3f}, update {update:.3f}, write {write:.3f})")


if __name__ == "__main__":
    main()
