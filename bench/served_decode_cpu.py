"""Who decodes a served model's batches: the worker, or the model server for every worker at once (CPU).

    python bench/served_decode_cpu.py [--rounds 60] [--batch 8] [--model bench/_free_model.py:make_wide]

A worker's ModelStep on a model server gets its rows decoded by the server (``model_server.decoding``) where its
family allows; before, it decoded the raw outputs itself. On the H200 that decoding was each worker's own set of
small kernels and host syncs per batch, beside the forward (BENCHMARKS.md, *Fifteenth session*), which this machine
cannot show. What it can show is where the host work goes: two ModelSteps on one server, one decoded by the server
and one decoding itself (the path before), batches alternating, and per batch (medians) the call's wall time, the
worker's CPU time, its ``decode`` stage (with the server decoding: only the way back to frame pixels) and the
server's CPU time (a mean: the kernel counts it in ticks). The model is a fixed YOLO head (``_free_model.py``; ``make_wide``: 8 400 anchors, 80 classes,
the head of a YOLO at 640x640, 20 boxes), so the forward costs nothing and decoding is what differs.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime, stime in clock ticks (USER_HZ = 100 on Linux)


def main() -> None:
    from inferstream.inference import InferConfig, load_model_step
    from inferstream.rawframe import RawFrame

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--model", default=f"{ROOT / '_free_model.py'}:make_wide")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    frames = [RawFrame("RGB", 64, 64, (torch.randint(0, 256, (64, 64, 3), dtype=torch.uint8, generator=gen),))
              for _ in range(args.batch)]
    with tempfile.TemporaryDirectory() as folder:
        socket = Path(folder) / "m.sock"
        server = subprocess.Popen([sys.executable, "-m", "inferstream.model_server", "--listen", str(socket),
                                   "--model", args.model], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            if '"ready"' not in server.stdout.readline():
                raise SystemExit("the model server did not start")
            cfg = InferConfig(model=f"ipc://{socket}", family="yolo")
            decoded, raw = load_model_step(cfg), load_model_step(cfg)  # as pyinfer loads them: a thread each
            raw.decodes_at_server = False
            rows: dict[str, list[tuple[float, float, float, float]]] = {"server decodes": [], "worker decodes": []}
            for step in (decoded, raw):
                step.warmup(args.batch)
            for _ in range(args.rounds):
                for name, step in (("server decodes", decoded), ("worker decodes", raw)):
                    server_cpu, cpu, t0 = _cpu_s(server.pid), time.process_time(), time.perf_counter()
                    dets = step.infer(frames)
                    rows[name].append((time.perf_counter() - t0, time.process_time() - cpu,
                                       step.stage_s["decode"], _cpu_s(server.pid) - server_cpu))
                    assert sum(len(d) for d in dets) == 20 * args.batch
            decoded.close()
            raw.close()
        finally:
            server.terminate()
            server.communicate(timeout=30)
    print(f"{args.batch} frames a batch, {args.rounds} batches each, alternating; medians in ms per batch\n")
    print("| who decodes | wall | worker CPU | worker's decode stage | server CPU (mean) |")
    print("|---|---|---|---|---|")
    for name, values in rows.items():
        wall, cpu, decode, _ = (1e3 * statistics.median(column) for column in zip(*values))
        server_cpu = 1e3 * statistics.mean(v[3] for v in values)  # the kernel counts it in 10 ms ticks: a mean
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {decode:.2f} | {server_cpu:.1f} |")


if __name__ == "__main__":
    main()
