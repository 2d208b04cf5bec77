"""The model's forward on the CPU, uncompiled (``graph=off``: eager, channels_last) against ``graph=inductor``,
side by side in one run: does compiling pay on a CPU as it does on CUDA (``BENCHMARKS.md``, *Twenty-fourth
session*)?

    python bench/compiled_cpu.py [--batches 1,4] [--rounds 3] [--seconds 6]

Model: the real YOLOv8s person detector (``best.pt``, ``trust-checkpoint``) at 640×480, the rectangle pyinfer runs
4:3 video at on the CPU. Each round times every (graph, batch) pair for ``--seconds``, alternating, so drift in a
shared VM's speed falls on both; the table gives each pair's median images/s, the compile time, and the largest
difference between the two outputs.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferstream.backends.loader import load_backend
from inferstream.samples import person_detector


def rate(backend: object, x: torch.Tensor, seconds: float) -> float:
    """Images per second of back-to-back forwards of ``x`` for about ``seconds``."""
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        backend(x)  # type: ignore[operator]
        done += x.shape[0]
    return done / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    model = str(person_detector("pt"))
    backends = {}
    for graph in ("off", "inductor"):
        started = time.perf_counter()
        backends[graph] = load_backend(model, trust_checkpoint=True, graph=graph)
        backends[graph].warmup(max(batches), (480, 640))
        print(f"{graph}: loaded and warmed up in {time.perf_counter() - started:.1f} s", flush=True)
    x = torch.rand(max(batches), 3, 480, 640, generator=torch.Generator().manual_seed(0))
    (plain,), (compiled,) = backends["off"](x), backends["inductor"](x)
    print(f"largest output difference: {float((plain - compiled).abs().max()):.2e} (scale {float(plain.abs().max()):.0f})")
    rates: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for b in batches:
            for graph, backend in backends.items():
                rates.setdefault((graph, b), []).append(rate(backend, x[:b], args.seconds))
    print("\n| batch | graph=off img/s | graph=inductor img/s | ratio | torch threads |\n|---|---|---|---|---|")
    for b in batches:
        off, ind = statistics.median(rates["off", b]), statistics.median(rates["inductor", b])
        print(f"| {b} | {off:.2f} | {ind:.2f} | {ind / off:.2f} | {torch.get_num_threads()} |")


if __name__ == "__main__":
    main()
