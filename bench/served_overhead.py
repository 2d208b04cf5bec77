"""What a call through the model server costs over the same model loaded in the process (CPU, side by side).

    python bench/served_overhead.py [--calls 40] [--batches 1,4,8] [--size 640]

``infer.model-server`` puts the model in a process of its own: a worker's batch is copied into a tensor shared
with the server, a request and an answer cross a Unix socket, and the outputs come back as views of shared
tensors (``backends/served.py``). That path's cost is what this measures, per call, with the same model loaded here
and in a server started by this script, calls alternating between the two so that both see the same machine:

- ``_free_model.py`` (a fixed YOLO head, no arithmetic): the round trip itself;
- the real YOLOv8s person detector at ``--size``: the round trip against a forward.

On the GPU the same path copies on the device and opens CUDA IPC handles once; what it buys there (one forward for
the batches of every worker) needs the H200 (``bench/gpu/app_workers.py`` with ``:m`` runs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent


def _serve(model: str, socket: Path, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", "inferstream.model_server", "--listen", str(socket), "--model",
                             model, *extra], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if '"ready"' not in proc.stdout.readline():
        raise SystemExit(f"the model server for {model} did not start")
    return proc


def _time(backend: Any, batch: torch.Tensor) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        backend(batch)
    return (time.perf_counter() - t0) * 1e3


def measure(name: str, model: str, extra: tuple[str, ...], batches: list[int], size: int, calls: int
            ) -> list[dict[str, Any]]:
    from inferstream.backends.loader import load_backend

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        server = _serve(model, Path(folder) / "m.sock", *extra)
        try:
            local = load_backend(model, trust_checkpoint=bool(extra))
            served = load_backend(f"ipc://{folder}/m.sock")
            for n in batches:
                batch = torch.rand((n, 3, size, size), generator=torch.Generator().manual_seed(n))
                served.warmup(n, (size, size))
                for backend in (local, served):  # first calls: allocation, caches
                    _time(backend, batch)
                times: dict[str, list[float]] = {"local": [], "served": []}
                for i in range(calls):
                    order = (("local", local), ("served", served)) if i % 2 == 0 else (("served", served),
                                                                                       ("local", local))
                    for key, backend in order:
                        times[key].append(_time(backend, batch))
                here, there = statistics.median(times["local"]), statistics.median(times["served"])
                rows.append({"model": name, "batch": n, "local_ms": round(here, 3), "served_ms": round(there, 3),
                             "overhead_ms": round(there - here, 3), "served_over_local": round(there / here, 3)})
                print(rows[-1], flush=True)
            served.close()
        finally:
            server.terminate()
            server.communicate(timeout=30)
    return rows


def main() -> int:
    from inferstream.samples import person_detector

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    sys.path.insert(0, str(ROOT))
    rows = measure("free model (round trip only)", f"{ROOT / '_free_model.py'}:make", (), batches, args.size,
                   args.calls)
    rows += measure("YOLOv8s person detector", str(person_detector("pt")), ("--trust-checkpoint",), batches,
                    args.size, max(4, args.calls // 4))
    print("| model | batch | in process, ms | served, ms | overhead, ms | served / in process |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['batch']} | {r['local_ms']} | {r['served_ms']} | {r['overhead_ms']} | "
              f"{r['served_over_local']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
