"""The model server's CUDA graph of a batch against the bench's bare graph of the same TorchScript, variant by variant.

    python bench/gpu/graph_gap.py --out DIR [--model M] [--batches 8,32] [--mps off,on] [--rounds N]

Each variant runs in its own process (TorchScript's profiling state and cuDNN's choices are per process) and
times its graphs of ``--batches`` two ways: the replay loop of ``app_workers.bare_ceiling`` (wall clock over
``1600 // b`` back-to-back replays, median of 5) and the shortest single replay on CUDA events
(``cuda_graphs._replay_ms``, what the server says at its warm-up). Variants:

- ``bare``: ``bare_ceiling``'s capture, the batches in the given order on one loaded model;
- ``bare-buckets``: the same capturing 1, 2, 4, ... up to the largest batch first (the server's order);
- ``bare-pool``: the same with one memory pool for all graphs and thread-local capture (``CudaGraphs``' way);
- ``backend``: ``TorchBackend.load`` + ``warmup(max batch)`` as the model server does (the graphs of 1, 2, 4, ...
  captured in that order), then the graphs of ``--batches`` timed;
- ``backend-capture``: ``TorchBackend.load``'s module captured by ``bare``'s code (loading apart from capture).

Every graph is timed on three inputs written into its static input: what it was captured on, uniform random
values in [0, 1] (``bare_ceiling``'s), and zeros (an input of constant colour): a GPU's speed can depend on the
values it computes on (call T: 8 % slower on zeros), so a graph timed on one input says little of another.

``--mps on`` runs every variant again as a client of a private MPS daemon (as the app's workers and server run).
Writes ``graph_gap.json`` and prints one table.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bare_graph import capture, replay_rate

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("bare", "bare-buckets", "bare-pool", "backend", "backend-capture")


def measure(variant: str, model_path: Path, batches: list[int]) -> dict[str, Any]:
    """One variant in this process: ``{"b8": {"loop_ms", "event_ms", "rand_loop_ms", "zeros_loop_ms"}, ...}``."""
    import torch

    from inferstream.backends.cuda_graphs import _replay_ms, graph_buckets

    captured: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}  # batch: its graph and static input
    keep: list[Any] = []
    if variant.startswith("bare") or variant == "backend-capture":
        if variant == "backend-capture":
            from inferstream.backends.torch_backend import TorchBackend

            model = TorchBackend.load(model_path, device=torch.device("cuda"), precision="fp16", graph="off")._model
        else:
            model = torch.jit.load(str(model_path), map_location="cuda").half().eval()
            model = model.to(memory_format=torch.channels_last)
        pool = torch.cuda.graph_pool_handle() if variant == "bare-pool" else None
        order = graph_buckets(max(batches)) + batches if variant == "bare-buckets" else batches
        for b in order:
            x = torch.rand((b, 3, 640, 640), device="cuda").half().contiguous(memory_format=torch.channels_last)
            graph, outputs = capture(model, x, pool)
            keep.append(outputs)
            captured[b] = (graph, x)
    else:
        from inferstream.backends.torch_backend import TorchBackend

        backend = TorchBackend.load(model_path, device=torch.device("cuda"), precision="fp16", graph="auto")
        graphs = backend._graphs
        assert graphs is not None
        with torch.inference_mode():
            for b in graph_buckets(max(batches)) + batches:
                graphs.prepare(b, (640, 640))
        captured = {b: (graphs._graphs[b, 640, 640].graph, graphs._graphs[b, 640, 640].input) for b in batches}
    out: dict[str, Any] = {}
    for b, (graph, static) in captured.items():
        row = {"loop_ms": round(1000 * b / replay_rate(graph, b), 3),
               "event_ms": round(_replay_ms(graph, times=10), 3)}
        for name, fill in (("rand", torch.rand_like), ("zeros", torch.zeros_like)):
            with torch.inference_mode():  # the backend's static inputs are inference tensors
                static.copy_(fill(static))
            row[f"{name}_loop_ms"] = round(1000 * b / replay_rate(graph, b), 3)
        out[f"b{b}"] = row
    torch.cuda.synchronize()
    return out


def _child(variant: str, args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", variant, "--model", str(args.model), "--batches", args.batches]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]}
    return dict(json.loads(lines[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--model", type=Path, default=ROOT / ".gpu-carry" / "models" / "yolo11s-random.torchscript")
    ap.add_argument("--batches", default="8,32")
    ap.add_argument("--mps", default="off")
    ap.add_argument("--rounds", type=int, default=1, help="each variant this many times, alternating")
    ap.add_argument("--child", choices=VARIANTS)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        print(json.dumps(measure(args.child, args.model, batches)), flush=True)
        os._exit(0)  # tearing down CUDA graphs after the CUDA context can crash the interpreter's exit
    from inferstream.app.mps import cuda_mps

    report: dict[str, Any] = {}
    for mps in args.mps.split(","):
        with cuda_mps(mps, 2, "cuda", lambda s: print(s, flush=True)):  # type: ignore[arg-type]
            # taken inside the block: the daemon's pipe folder is in the environment there
            env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
            for rnd in range(args.rounds):
                for variant in VARIANTS:
                    res = _child(variant, args, env)
                    report[f"{variant}-mps{mps}-{rnd}"] = res
                    print(f"| {variant} | mps {mps} | {rnd} | " + " | ".join(
                        f"b{b}: " + ", ".join(f"{k} {v}" for k, v in res.get(f"b{b}", {}).items()) for b in batches)
                        + (f" | {res['error']}" if "error" in res else "") + " |", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "graph_gap.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
