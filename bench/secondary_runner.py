"""The secondary runner (crop every object of a batch + classify) vs the classifier's raw forward on the same crops.

    python bench/secondary_runner.py [--device cuda] [--frames 16] [--objects 20] [--size 224]

GStreamer-free, so it runs on the GPU machine: F frames of 1920x1080 RGB already on the device (what pyinfer maps
from CUDA memory), N boxes each; ``ObjectClassifier.infer`` (colour to RGB, batched crop + resize, normalise,
forward, top-1 to the host) against ``backend(x)`` on a ready ``(F*N, 3, size, size)`` batch. torchvision's
ResNet-18 with random weights (speed only).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferstream.inference import InferConfig
from inferstream.rawframe import RawFrame
from inferstream.secondary import ObjectClassifier, ObjectFrame


def _timed(fn: object, device: torch.device, repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn()`` (synchronised on CUDA)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    runner = ObjectClassifier(InferConfig(model="torchvision.models:resnet18", device=args.device,
                                          input_size=(args.size, args.size), objects=True))
    device = runner.backend.device
    g = torch.Generator().manual_seed(0)
    frames = [RawFrame("RGB", 1920, 1080, ((torch.rand((1080, 1920, 3), generator=g) * 255).to(torch.uint8)
                                          .to(device),)) for _ in range(args.frames)]
    xy = torch.rand((args.frames, args.objects, 2), generator=g) * torch.tensor([1700.0, 800.0])
    wh = 40 + torch.rand((args.frames, args.objects, 2), generator=g) * torch.tensor([160.0, 240.0])
    boxes = torch.cat([xy, xy + wh], dim=2)
    items = [ObjectFrame(f, b) for f, b in zip(frames, boxes)]
    x = torch.rand((args.frames * args.objects, 3, args.size, args.size), dtype=runner.backend.dtype, device=device)
    for _ in range(3):
        runner.infer(items)
        runner.backend(x)
    fulls, raws = [], []
    for _ in range(args.repeats):  # alternated: a shared machine's load moves while we measure
        fulls.append(_timed(lambda: runner.infer(items), device, 1))
        raws.append(_timed(lambda: runner.backend(x), device, 1))
    full, raw = statistics.median(fulls), statistics.median(raws)
    n = args.frames * args.objects
    print(f"{args.device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), {runner.backend.dtype}, "
          f"{args.frames} frames 1920x1080 x {args.objects} objects = {n} crops at {args.size}x{args.size}\n")
    print("| run | ms per batch | crops/s |\n|---|---|---|")
    print(f"| classifier raw forward, batch {n} | {1e3 * raw:.2f} | {n / raw:.0f} |")
    print(f"| secondary runner (crop + normalise + forward + top-1 to host) | {1e3 * full:.2f} | {n / full:.0f} |")
    print(f"| ratio raw / runner | {raw / full:.2f} | |")


if __name__ == "__main__":
    main()
