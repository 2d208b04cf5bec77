"""Cross-stream batching on CPU: N = 1, 2, 4, 8 streams of vtest.avi through one batch-group, side by side with
the raw model at the same batch size, in one run.

    python bench/batching_cpu.py [--frames 24] [--streams 1,2,4,8] [--in-flight 1,2]

Each stream: filesrc ! decodebin ! videoconvert ! RGB ! queue ! pyinfer batch-group=g batch-size=N in-flight=F
! fakesink. Reported: total frames/s, mean batch fill, mean wait per frame (latency added by batching), mean batch
time, and the backend alone on a ready (N, 3, 640, 640) batch. Several ``--in-flight`` values run one after the
other for each N (their order alternating from one N to the next).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from pyinfer_cpu import publish

from inferstream.samples import person_detector, vtest_path


def run_streams(model: Path, n: int, frames: int, in_flight: int = 1) -> tuple[float, dict[str, float]]:
    branches = " ".join(
        f"filesrc location={vtest_path()} ! decodebin ! videoconvert ! video/x-raw,format=RGB ! queue "
        f"! pyinfer name=inf{k} model={model} trust-checkpoint=true batch-group=bench{n}-{in_flight} "
        f"batch-size={n} in-flight={in_flight} "
        f"max-latency=200 ! identity name=out{k} eos-after={frames + 1} ! fakesink sync=false" for k in range(n))
    pipeline = Gst.parse_launch(branches)
    stamps: list[float] = []
    for k in range(n):  # timed from the first frame out to the last: model loading and warm-up excluded
        pipeline.get_by_name(f"out{k}").get_static_pad("src").add_probe(
            Gst.PadProbeType.BUFFER, lambda *_: (stamps.append(time.perf_counter()), Gst.PadProbeReturn.OK)[1])
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(1800 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    stats = json.loads(pipeline.get_by_name("inf0").get_property("stats"))
    pipeline.set_state(Gst.State.NULL)
    if msg is None or msg.type == Gst.MessageType.ERROR:
        raise SystemExit(f"pipeline failed: {msg.parse_error() if msg else 'timeout'}")
    first_batch = min(n, len(stamps))  # the first batch's frames leave together: count from the end of it
    return (len(stamps) - first_batch) / (max(stamps) - sorted(stamps)[first_batch - 1]), stats


def raw_fps(model: Path, batch: int, repeats: int) -> float:
    import torch

    from inferstream.backends.loader import load_backend

    backend = load_backend(str(model), trust_checkpoint=True)
    x = torch.rand((batch, 3, 640, 640), dtype=backend.dtype)
    backend(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        backend(x)
        times.append(time.perf_counter() - t0)
    return batch / statistics.mean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=24, help="frames per stream")
    parser.add_argument("--streams", default="1,2,4,8")
    parser.add_argument("--in-flight", default="1", help="pyinfer in-flight values to compare, e.g. 1,2")
    args = parser.parse_args()
    depths = [int(f) for f in args.in_flight.split(",")]
    Gst.init(None)
    model = person_detector("pt")
    lines = [("YOLOv8s person detector (torch, fp32, 640x640), CPU, vtest.avi streams, "
             f"{args.frames} frames per stream"), "",
             ("| streams = batch | in flight | raw model (frames/s) | pipeline total (frames/s) | ratio | mean fill | "
             "mean wait per frame (ms) | mean batch time (ms) |"), "|---|---|---|---|---|---|---|---|"]
    for i, n in enumerate(int(s) for s in args.streams.split(",")):
        raw = raw_fps(model, n, max(2, 8 // n))
        for depth in depths if i % 2 == 0 else depths[::-1]:
            fps, stats = run_streams(model, n, args.frames, depth)
            lines.append(f"| {n} | {depth} | {raw:.2f} | {fps:.2f} | {fps / raw:.2f} | {stats['mean-fill']:.2f} | "
                         f"{stats['mean-wait-ms']:.1f} | {stats['mean-infer-ms']:.0f} |")
            print(lines[-1], flush=True)
    publish("batching_cpu", lines)


if __name__ == "__main__":
    main()
