"""What ``inferstream run --workers N`` gives on this machine: the same config with 1 and with N workers, side by side.

    python bench/workers_cpu.py [--workers 1,2,2s] [--streams 4] [--frames 300] [--repeats 2] [--only free|person]
                                [--in-flight N] [--free-model make|make_wide]

A count with ``s`` (``2s``) runs those workers with ``infer.model-server``: one more process holds the model and
runs the waiting batches of all workers as one forward, instead of a copy of the model (and its thread pool) in
each worker.

Two workloads, each run through the real CLI (``inferstream run CONFIG --workers N``), the worker counts alternating
so that a load change on a shared host hits both alike:

- ``free``: ``_free_model.py`` (a model that costs nothing, 64x64 test frames, 20 boxes a frame) then pytracker:
  only the host work per frame that ``host_overhead_cpu.py`` measures, the GIL-bound part that workers spread over
  interpreters.
- ``person``: the sample person detector (ONNX Runtime, 640x640) on vtest.avi, the model's own threads busy.

Reported per row: frames/s over the active part (the run's summary: first frame to last), wall seconds of the
whole command (start-up, model load in every worker, the run), host cores busy over the wall time (CPU time of the
command and all its workers / wall), and CPU µs per frame after start-up: (CPU time of the run - CPU time of the
same command on 1 frame per stream) / frames. That last one is what the work costs, whoever else shares the cores;
frames/s says what the cores that were free made of it. Best of the repeats for frames/s (with that run's wall and
cores); the median for µs per frame.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

BENCH = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))}


def config(workload: str, streams: int, frames: int, server: bool = False, in_flight: int = 1,
           free_model: str = "make") -> dict[str, Any]:
    served: dict[str, Any] = {"model-server": {}} if server else {}
    if in_flight > 1:
        served["in-flight"] = in_flight
    if workload == "free":
        sources = [{"id": f"s{i}", "test": "ball", "num-buffers": frames, "width": 64, "height": 64}
                   for i in range(streams)]
        return {"sources": sources, "tracker": {},
                "infer": {"model": f"_free_model:{free_model}", "model-family": "yolo", "input-size": 64, **served}}
    sources = [{"id": f"s{i}", "file": "sample:vtest", "max-frames": frames} for i in range(streams)]
    return {"sources": sources, "infer": {"model": "sample:person-detector", **served}}


def run(cfg_path: Path, workers: int, extra: Sequence[str] = (), env: Mapping[str, str] | None = None
        ) -> dict[str, float]:
    """One ``inferstream run`` (``extra``: more options; ``env``: more variables): frames, frames/s (its summary),
    wall s, CPU s of it and its workers (not of a cluster's actors: they are Ray's processes), cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "inferstream.app.cli", "run", str(cfg_path), "--console", "quiet",
                           "--workers", str(workers), *extra], check=False, capture_output=True, text=True,
                          env={**ENV, **(env or {})})
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"workers={workers}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    total = re.search(r"^total: (\d+) frames in ([\d.]+) s \(([\d.]+) fps\)", proc.stdout, re.MULTILINE)
    if total is None:
        raise SystemExit(f"no summary in:\n{proc.stdout}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"frames": int(total.group(1)), "fps": float(total.group(3)), "wall": wall, "cpu": cpu,
            "cores": cpu / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="1,2", help="worker counts to compare")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--frames", type=int, default=300, help="frames per stream")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", choices=("free", "person"))
    ap.add_argument("--in-flight", type=int, default=1, help="pyinfer's in-flight in every run")
    ap.add_argument("--free-model", choices=("make", "make_wide"), default="make",
                    help="free's model: _free_model.py's make (a (B, 84, 84) head) or make_wide (8 400 anchors, the "
                    "head of a YOLO at 640x640)")
    args = ap.parse_args()
    counts = args.workers.split(",")  # "2": two workers, "2s": two workers on one model server
    print(f"host: {len(os.sched_getaffinity(0))} cores; {args.streams} streams x {args.frames} frames, in-flight "
          f"{args.in_flight}; best of {args.repeats}, worker counts alternating\n")
    print("| workload | workers | model server | frames/s | vs first | wall s | host cores | CPU µs/frame after "
          "start-up |")
    print("|---|---|---|---|---|---|---|---|")
    for workload in [args.only] if args.only else ["free", "person"]:
        with tempfile.TemporaryDirectory() as tmp:
            paths = {}
            for n in counts:
                server = n.endswith("s")
                paths[n] = Path(tmp) / f"{workload}-{n}.yaml", Path(tmp) / f"{workload}-{n}-startup.yaml"
                paths[n][0].write_text(yaml.safe_dump(config(workload, args.streams, args.frames, server,
                                                              args.in_flight, args.free_model)))
                paths[n][1].write_text(yaml.safe_dump(config(workload, args.streams, 1, server, args.in_flight,
                                                              args.free_model)))
            best: dict[str, dict[str, float]] = {}
            us: dict[str, list[float]] = {n: [] for n in counts}
            for _ in range(args.repeats):
                for n in counts:
                    workers = int(n.removesuffix("s"))
                    r, base_cpu = run(paths[n][0], workers), run(paths[n][1], workers)["cpu"]
                    us[n].append(1e6 * (r["cpu"] - base_cpu) / r["frames"])
                    if n not in best or r["fps"] > best[n]["fps"]:
                        best[n] = r
        base = best[counts[0]]["fps"]
        for n in counts:
            r = best[n]
            print(f"| {workload} | {n.removesuffix('s')} | {'yes' if n.endswith('s') else 'no'} | {r['fps']:.1f} | "
                  f"{r['fps'] / base:.2f}x | {r['wall']:.1f} | "
                  f"{r['cores']:.2f} | {statistics.median(us[n]):.0f} |", flush=True)


if __name__ == "__main__":
    main()
