#!/usr/bin/env python3
"""What a CUDA graph per batch size costs and gives: the model server captures one for every sum of whole
requests (``cuda_graphs.request_sums``), so its start-up and its forwards depend on these numbers.

    python bench/gpu/graph_sizes.py --out DIR [--sizes 8,16,24,32,40,48,56,64]

For the carried TorchScript (yolo11s, fp16, channels_last), each mode loaded afresh:
  backend    ``TorchBackend.warmup(n)`` for each size in turn, as the server does: seconds per size (TorchScript
             profiles and fuses each new shape before its capture)
  fused      a bare capture per size under TorchScript's optimising executor (fusion), then its replay rate
  unfused    the same with ``torch.jit.optimized_execution(False)``: no per-shape profiling or fusion
Replay rates are img/s, the median of 5 timings on a static input (no copies). Writes ``graph_sizes.json``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / ".gpu-carry" / "models" / "yolo11s-random.torchscript"


def _bare(sizes: list[int], optimize: bool) -> dict[str, Any]:
    import torch

    model = torch.jit.load(str(MODEL), map_location="cuda").half().eval().to(memory_format=torch.channels_last)
    out: dict[str, Any] = {}
    for b in sizes:
        x = torch.rand((b, 3, 640, 640), device="cuda").half().contiguous(memory_format=torch.channels_last)
        torch.cuda.synchronize()
        started = time.perf_counter()
        with torch.inference_mode(), torch.jit.optimized_execution(optimize):  # type: ignore[attr-defined]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model(x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                model(x)
        torch.cuda.synchronize()
        capture_s = time.perf_counter() - started
        rates = []
        for _ in range(5):
            iters = max(5, 1600 // b)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(iters):
                graph.replay()
            torch.cuda.synchronize()
            rates.append(b * iters / (time.perf_counter() - t))
        out[str(b)] = {"capture_s": round(capture_s, 2), "img_s": round(statistics.median(rates), 1)}
        del graph
    del model
    torch.cuda.empty_cache()
    return out


def _backend(sizes: list[int]) -> dict[str, Any]:
    import torch

    from inferstream.backends.torch_backend import TorchBackend

    backend = TorchBackend.load(MODEL, device=torch.device("cuda"), precision="fp16")
    out: dict[str, Any] = {}
    for b in sizes:
        started = time.perf_counter()
        backend.warmup(b, (640, 640))
        out[str(b)] = round(time.perf_counter() - started, 2)
    out["status"] = backend.graph_status
    backend.close()
    return out


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", default="8,16,24,32,40,48,56,64")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    result: dict[str, Any] = {"torch": torch.__version__, "fuser": {
        "texpr": torch._C._jit_texpr_fuser_enabled(), "can_fuse_on_gpu": torch._C._jit_can_fuse_on_gpu()}}
    result["backend_warmup_s"] = _backend(sizes)
    print("backend", result["backend_warmup_s"], flush=True)
    for name, optimize in (("fused", True), ("unfused", False)):
        result[name] = _bare(sizes, optimize)
        print(name, result[name], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "graph_sizes.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
