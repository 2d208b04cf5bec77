"""Instance masks' assembly alone (``ops.masks.retina_masks`` + the device-to-host copy) at N objects per frame, on
any torch device: the GPU host has no GStreamer, so this times the op ``bench/masks_cost.py`` times in a pipeline.

    PYTHONPATH=src python bench/gpu/masks_micro.py --device cuda --objects 20 --batch 1 8

Geometry: 768x576 frames, prototypes 32x160x160, N boxes of ~235x235 px (``bench/masks_cost.py``'s mean crop on
vtest with the random-weight yolo11n-seg: 55.6k px), seeded random prototypes and coefficients.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from inferstream.ops.masks import retina_masks


def frame_ms(device: str, objects: int, batch: int, repeats: int) -> float:
    gen = torch.Generator().manual_seed(0)
    protos = torch.randn((batch, 32, 160, 160), generator=gen).to(device)
    coeffs = torch.randn((batch * objects, 32), generator=gen).to(device)
    crops = []
    for _ in range(batch):
        for i in range(objects):
            x, y = (i * 27) % 520, (i * 41) % 330
            crops.append((x, y, x + 236, y + 236))
    boxes = torch.tensor(crops, dtype=torch.float32)
    times = []
    for _ in range(repeats + 3):
        t0 = time.perf_counter()
        retina_masks(protos, coeffs, [objects] * batch, crops, boxes, [(576, 768)] * batch).cpu()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:]) * 1e3 / batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    print("| device | batch | objects/frame | masks assembled + copied (ms/frame) |\n|---|---|---|---|")
    for b in args.batch:
        print(f"| {name} | {b} | {args.objects} | {frame_ms(args.device, args.objects, b, args.repeats):.2f} |")


if __name__ == "__main__":
    main()
