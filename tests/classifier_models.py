"""Classifiers for the secondary-inference tests: torchvision's ResNet-18 with seeded random weights (no trained
weights ship), and the same model counting the crops it sees (to count model work under reinfer-interval).

Random weights with torchvision's default BatchNorm statistics (mean 0, variance 1) give every crop the same top-1;
re-estimating the statistics on seeded Gaussian noise (data-independent) spreads vtest's pedestrians over most of
the 8 classes, with top-1 margins far above float noise (~1e-3 smallest, ~0.2 median, against ~1e-6 of noise).
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

NUM_CLASSES = 8
LABELS = tuple(f"kind{i}" for i in range(NUM_CLASSES))


def resnet18_seeded() -> nn.Module:
    """ResNet-18 (``weights=None``, 8 classes), seed 0, in eval mode."""
    from torchvision.models import resnet18

    torch.manual_seed(0)
    net = resnet18(weights=None, num_classes=NUM_CLASSES)
    for bn in net.modules():
        if isinstance(bn, nn.BatchNorm2d):
            bn.momentum = None  # cumulative average over the calibration batch
    net.train()
    with torch.no_grad():
        net(torch.randn(64, 3, 64, 64))
    return net.eval()


class Counting(nn.Module):
    """``resnet18_seeded`` that counts the crops of every batch it classifies (class-wide: the element builds it)."""

    rows: ClassVar[list[int]] = []

    def __init__(self) -> None:
        super().__init__()
        self.net = resnet18_seeded()

    def forward(self, x: Tensor) -> Tensor:
        # warm-up inputs are blank (each channel constant, normalised or not): count only rows that are real crops
        Counting.rows.append(int((x.flatten(2).std(2).amax(1) > 0).sum()))
        return self.net(x)


def counting() -> nn.Module:
    return Counting().eval()
