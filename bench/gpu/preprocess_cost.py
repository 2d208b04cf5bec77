"""Fast CUDA preprocessing: the fused kernel against the torch ops it replaces, side by side in one process.

    python bench/gpu/preprocess_cost.py [--frames 32] [--reps 50]     # on a CUDA machine

Builds N pitched NV12 1080p frames in device memory (as nvh264dec hands them over) and times
``preprocess_batch(..., exact=False)`` into a 640x640 fp16 canvas, each way, alternating: GPU time per batch
(back-to-back calls, synchronised), host time per call (each call alone: Python and launches), and the
number of kernels the call queues (torch profiler). Prints a markdown table.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from unittest import mock

import torch

from inferstream.ops.letterbox import preprocess_batch
from inferstream.rawframe import RawFrame


def _frames(n: int, h: int, w: int, pitch: int) -> list[RawFrame]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    frames = []
    for _ in range(n):
        luma = torch.randint(16, 236, (h, pitch), dtype=torch.uint8, device="cuda", generator=gen)[:, :w]
        uv = torch.randint(16, 241, (h // 2, pitch), dtype=torch.uint8, device="cuda", generator=gen)[:, :w]
        frames.append(RawFrame("NV12", w, h, (luma, uv.view(h // 2, w // 2, 2)), "bt709", False))
    return frames


def _time(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """(GPU ms per call, host ms per call): back-to-back calls, synchronised at the end; then each call alone on
    an idle device (what the batch's thread spends in Python and launches)."""
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    gpu = (time.perf_counter() - t) * 1e3 / reps
    host = 0.0
    for _ in range(reps):
        torch.cuda.synchronize()
        h = time.perf_counter()
        fn()
        host += time.perf_counter() - h
    return gpu, host * 1e3 / reps


def _kernels(fn: Callable[[], object]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    frames = _frames(args.frames, 1080, 1920, 2048)

    def fused() -> object:
        return preprocess_batch(frames, (640, 640), "cuda", torch.float16, exact=False)

    def torch_ops() -> object:
        with mock.patch("inferstream.ops.letterbox_float.letterbox_yuv420_into", return_value=False):
            return fused()

    a, b = fused()[0], torch_ops()[0]
    diff = (a.float() - b.float()).abs() * 255
    rows: dict[str, list[tuple[float, float]]] = {"fused kernel": [], "torch ops": []}
    for _ in range(3):  # alternate, so a clock or neighbour change hits both
        rows["fused kernel"].append(_time(fused, args.reps))
        rows["torch ops"].append(_time(torch_ops, args.reps))
    print(f"{args.frames} NV12 1920x1080 frames (pitch 2048) -> 640x640 fp16, {torch.cuda.get_device_name()}; "
          f"outputs differ by {diff.mean().item():.4f} levels on average, {diff.max().item():.3f} at most\n")
    print("| path | GPU ms per batch | host ms per call | kernels per call |\n|---|---|---|---|")
    for name, fn in (("fused kernel", fused), ("torch ops", torch_ops)):
        gpu = statistics.median(r[0] for r in rows[name])
        host = statistics.median(r[1] for r in rows[name])
        print(f"| {name} | {gpu:.3f} | {host:.3f} | {_kernels(fn)} |")


if __name__ == "__main__":
    main()
