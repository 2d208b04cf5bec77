"""A detector that costs nothing: a fixed yolo head (``(B, 84, 84)``, 64x64 input) with 20 confident boxes.

For ``host_overhead_cpu.py``: with the model's arithmetic gone, what a pipeline spends per frame is pyinfer's and
pytracker's own host work, which is what bounds the GPU pipeline (``bench/results/gpu.md``). Loaded by pyinfer as
``model=bench/_free_model.py:make``.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

BOXES, ANCHORS, CLASSES, SIZE = 20, 84, 80, 64


class FreeDetector(nn.Module):
    """Returns the same head for every image; the input only sets the batch size."""

    names: ClassVar[dict[int, str]] = {i: f"class{i}" for i in range(CLASSES)}
    task = "detect"
    input_size = (SIZE, SIZE)

    def __init__(self, width: int = ANCHORS) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        head = torch.rand(4 + CLASSES, width, generator=gen) * 0.1  # class scores below any threshold
        anchors = torch.randperm(width, generator=gen)[:BOXES]
        k = torch.arange(BOXES, dtype=torch.float32)
        head[0, anchors] = 6 + (k % 5) * 12  # cx: a 5 x 4 grid of 8 x 10 boxes, no two overlapping
        head[1, anchors] = 7 + (k // 5) * 15
        head[2, anchors], head[3, anchors] = 8.0, 10.0
        head[4 + (k.long() % CLASSES), anchors] = 0.6 + 0.3 * k / BOXES
        self.register_buffer("head", head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head.expand(x.shape[0], -1, -1).clone()


def make() -> FreeDetector:
    return FreeDetector()


def make_wide() -> FreeDetector:
    """The same 20 boxes among 8 400 anchors: the head of a YOLO at 640x640, whose decoding (the class maximum
    over every anchor) is what a served model's worker or server spends its decode on."""
    return FreeDetector(width=8400)
