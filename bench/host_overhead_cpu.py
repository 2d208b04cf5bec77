"""Host cost per frame of the pipeline around the model, with a model that costs nothing (CPU, side by side).

    python bench/host_overhead_cpu.py [--frames 300] [--streams 1,4,8,16] [--pytracker-only]

On the H200 the GPU waits for Python: the model runs 2 700 img/s, the pipeline with pytracker ~250 frames/s
(``bench/results/gpu.md``). What bounds it is the host work per frame (mapping, batching, decoding, metadata,
tracking) serialised by the GIL, and that can be measured here. The model is ``_free_model.py``: a module that
returns a fixed yolo head with 20 confident boxes, so pyinfer's own work is all that is timed: the decoder, NMS,
metadata on 20 boxes, and ByteTrack on 20 tracks.

Per stream: ``videotestsrc ! RGB 64x64 ! pyinfer (free model, 64x64 input: next to no arithmetic, no resize;
batch-group, batch = streams) ! [pytracker !] fakesink``. Reported: frames/s in the steady state (10 %..90 % of
the frames, from pyinfer's batch counter), host cores busy (averaged over the whole run, start-up included), and
the p90 lateness of a 2 ms sleep in a Python thread (how long a thread waits for the GIL). Each stream count with
and without a ``queue`` before pytracker (tracking then overlaps the next batch instead of following it); at the
largest count also without pytracker, and without ``serial.priority`` (the batch no longer holds pytracker's
shared thread back).
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
from measure import Nvml, Sampler, run_pipeline

FREE_MODEL = Path(__file__).resolve().parent / "_free_model.py"


def pipeline_desc(streams: int, frames: int, tracker: bool, queue: bool = False) -> str:
    track = (("queue max-size-buffers=2 ! " if queue else "") + "pytracker ! ") if tracker else ""
    chain = []
    for i in range(streams):
        chain.append(f"videotestsrc num-buffers={frames} pattern=ball ! video/x-raw,format=RGB,width=64,height=64,"
                     f"framerate=30/1 ! pyinfer name=inf{i} model={FREE_MODEL}:make model-family=yolo "
                     f"input-size=64 batch-group=free{streams} batch-size={streams} max-latency=50 ! "
                     + track + "fakesink sync=false")
    return "  ".join(chain)


def measure(streams: int, frames: int, tracker: bool, queue: bool = False) -> dict[str, Any]:
    with Sampler(Nvml()) as sampler:
        res = run_pipeline(pipeline_desc(streams, frames, tracker, queue), timeout_s=600, counter="inf0",
                           total=streams * frames, sampler=sampler)
    if res.get("error"):
        raise SystemExit(f"pipeline failed: {res['error']}")
    return {"fps": res["fps"], "cores": res["cpu_cores"], "gil_p90_ms": res.get("gil_wait_ms_p90"),
            "fill": res["batch_stats"].get("mean-fill")}


@contextlib.contextmanager
def without_priority() -> Any:
    """Batches run as before ``serial.priority`` existed (bench only; the product code is unchanged)."""
    from inferstream import batching

    saved = batching.priority
    batching.priority = contextlib.nullcontext
    try:
        yield
    finally:
        batching.priority = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frames", type=int, default=300, help="frames per stream")
    ap.add_argument("--streams", default="1,4,8,16")
    ap.add_argument("--pytracker-only", action="store_true",
                    help="only the 'N streams, pytracker' rows (to compare two checkouts side by side)")
    args = ap.parse_args()
    Gst.init(None)
    counts = [int(n) for n in args.streams.split(",")]
    rows = [(f"{n} streams, pytracker", n, True, False, False) for n in counts]
    if not args.pytracker_only:
        rows += [(f"{n} streams, queue ! pytracker", n, True, True, False) for n in counts]
        rows += [(f"{counts[-1]} streams, no pytracker", counts[-1], False, False, False),
                 (f"{counts[-1]} streams, pytracker, without serial.priority", counts[-1], True, False, True)]
    print("| pipeline | frames/s | host cores | GIL wait p90 (ms) | mean fill |")
    print("|---|---|---|---|---|")
    for name, n, tracker, queue, unprioritised in rows:
        with without_priority() if unprioritised else contextlib.nullcontext():
            r = measure(n, args.frames, tracker, queue)
        print(f"| {name} | {r['fps']} | {r['cores']} | {r['gil_p90_ms']} | {r['fill']} |", flush=True)


if __name__ == "__main__":
    main()
