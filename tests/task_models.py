"""Malformed segmentation / pose models as a user's ``path.py:factory`` spec names them (bad-input tests)."""
from __future__ import annotations

import torch


class _Head(torch.nn.Module):
    """Returns zeros of one fixed layout; declares its task and 80 names as an ultralytics model would."""

    def __init__(self, task: str, shapes: list[tuple[int, ...]]) -> None:
        super().__init__()
        self.task, self.names, self.shapes = task, [f"c{i}" for i in range(80)], shapes

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [torch.zeros((x.shape[0], *s), dtype=x.dtype, device=x.device) for s in self.shapes]


def seg_without_protos() -> torch.nn.Module:
    return _Head("segment", [(116, 8400)])


def pose_not_dividing() -> torch.nn.Module:
    return _Head("pose", [(136, 8400)])
