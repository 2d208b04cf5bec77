"""A user's own model code, as a ``package.module:factory`` spec would name it (used by the factory tests)."""
from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch import Tensor, nn


class TinyDetector(nn.Module):
    """A 2-class 'detector' shaped like a YOLO head: ``(B, 4 + 2, A)`` with A = (H/8) * (W/8).

    It declares its own facts the way the loader reads them: ``names``, ``imgsz``, ``task``, ``end2end``.
    """

    names: ClassVar[dict[int, str]] = {0: "cat", 1: "dog"}
    imgsz = (64, 96)
    task = "detect"
    end2end = False

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 6, kernel_size=8, stride=8)

    def forward(self, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        y = self.conv(x).flatten(2)
        return y, {"aux": y.mean(2)}  # a tuple with a dict inside: the backend flattens it to two tensors


def tiny_detector() -> nn.Module:
    """Factory with no arguments, as the loader calls it."""
    return TinyDetector()


def plain_callable() -> Callable[[Tensor], Tensor]:
    """Any callable taking the batch is accepted too; it gets the batch as the backend's dtype/device."""
    return lambda batch: batch.mean(dim=(2, 3))


def broken_factory() -> nn.Module:
    raise RuntimeError("weights file missing on purpose")


def returns_number() -> int:
    return 42


NOT_A_FUNCTION = 3
