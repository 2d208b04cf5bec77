"""What ``serial.priority`` buys a batch that shares the GIL with a busy tracking thread (CPU, no GStreamer).

    python bench/priority_gate_cost.py [--batches 150]

The H200 profile showed a pyinfer batch taking 20 ms under load for ~5 ms of host work: every torch call releases
the GIL, and pytracker's shared thread, busy in Python, kept it meanwhile. This reproduces the mechanism on the
CPU with the product's own parts: the "batch" is the YOLO decoder's flat path plus the one copy to the host
(``AnchorFreeDecoder.flat`` + ``to_host``: dozens of small torch calls) on a random ``(8, 84, 2100)`` head (a
320×320 input, so that the calls, not the arithmetic, dominate as on a GPU); the
tracking load is 8 threads feeding ``ByteTrack.update`` (20 moving boxes each) through one ``SerialWorker``, as 8
pytrackers do. Three cases, side by side: the batch alone, under tracking load, under tracking load inside a
``priority()`` section. Prints the median wall time per batch and the tracking updates per second meanwhile.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from contextlib import nullcontext

import torch
from _tracking_scene import FRAME_NS, default_bytetrack, grid_frame

from inferstream.detections import to_host
from inferstream.models.base import DecodeParams
from inferstream.models.yolo import AnchorFreeDecoder
from inferstream.shared_worker import SerialWorker, priority

STREAMS, BOXES = 8, 20


def _head(batch: int = 8, anchors: int = 2100, classes: int = 80) -> torch.Tensor:
    """A raw head with ~BOXES confident anchors per image, the rest below the threshold."""
    gen = torch.Generator().manual_seed(0)
    pred = torch.rand(batch, 4 + classes, anchors, generator=gen) * 0.2
    pred[:, :2] = torch.rand(batch, 2, anchors, generator=gen) * 280 + 20
    pred[:, 2:4] = 20
    pred[:, 4, torch.randperm(anchors, generator=gen)[:BOXES]] = 0.9
    return pred


def _decode_to_host(decoder: AnchorFreeDecoder, params: DecodeParams, pred: torch.Tensor) -> None:
    img, rows = decoder.flat([pred], params)
    to_host(rows, img)


def _track_forever(worker: SerialWorker, stop: threading.Event, updates: list[int]) -> None:
    tracker = default_bytetrack()
    frame = 0
    while not stop.is_set():
        dets = grid_frame(BOXES, frame, size=(60.0, 60.0))
        worker.run(lambda d=dets, f=frame: tracker.update(d, f * FRAME_NS))
        updates[0] += 1
        frame += 1


def ms_per_batch(batches: int, tracking: bool, gated: bool) -> tuple[float, float]:
    """(median ms per batch, tracking updates per second) over ``batches`` decoder batches."""
    decoder, params, pred = AnchorFreeDecoder(num_classes=80), DecodeParams(), _head()
    for _ in range(10):  # warm-up: torch's first calls allocate
        _decode_to_host(decoder, params, pred)
    worker, stop, updates = SerialWorker("bench-tracking"), threading.Event(), [0]
    threads = [threading.Thread(target=_track_forever, args=(worker, stop, updates)) for _ in range(STREAMS)]
    if tracking:
        for _ in threads:
            worker.acquire()
        for t in threads:
            t.start()
        time.sleep(0.2)
    times, t_start, n0 = [], time.perf_counter(), updates[0]
    for _ in range(batches):
        t0 = time.perf_counter()
        with priority() if gated else nullcontext():
            _decode_to_host(decoder, params, pred)
        times.append(time.perf_counter() - t0)
        time.sleep(0.002)  # the next batch's frames arriving
    rate = (updates[0] - n0) / (time.perf_counter() - t_start)
    stop.set()
    for t in threads if tracking else ():
        t.join()
    return 1e3 * statistics.median(times), rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=150)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print("| case | ms per batch (median) | tracking updates/s meanwhile |\n|---|---|---|")
    for name, tracking, gated in (("batch alone", False, False), ("under tracking load", True, False),
                                  ("under tracking load, priority()", True, True)):
        ms, rate = ms_per_batch(args.batches, tracking, gated)
        print(f"| {name} | {ms:.2f} | {rate:.0f} |")


if __name__ == "__main__":
    main()
