"""Small real torch models for pipeline tests: they *see* the frame and find coloured squares.

``color_blob_detector`` returns, per frame, one box per colour (red, green, blue: classes 0, 1, 2) around the pixels
where that channel dominates — an end-to-end layout ``(B, 3, 6)`` = x1, y1, x2, y2, score, class in input pixels.
A scene with known squares therefore has known detections, which makes stream mix-ups and model swaps checkable.
``shifted_blob_detector`` is the same with classes 3, 4, 5, so two models are told apart by their output.
"""
from __future__ import annotations

import torch
from torch import nn


class ColorBlobDetector(nn.Module):
    def __init__(self, class_offset: int = 0) -> None:
        super().__init__()
        self.class_offset = class_offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        out = torch.zeros((b, 3, 6), dtype=x.dtype, device=x.device)
        for c in range(3):
            others = torch.cat([x[:, :c], x[:, c + 1:]], dim=1).amax(dim=1)
            mask = (x[:, c] > 0.6) & (others < 0.35)  # [B, H, W]
            rows, cols = mask.any(dim=2), mask.any(dim=1)  # [B, H], [B, W]
            ys = torch.arange(h, device=x.device, dtype=x.dtype)
            xs = torch.arange(w, device=x.device, dtype=x.dtype)
            big = torch.tensor(1e9, dtype=x.dtype, device=x.device)
            out[:, c, 0] = torch.where(cols, xs, big).amin(dim=1)
            out[:, c, 1] = torch.where(rows, ys, big).amin(dim=1)
            out[:, c, 2] = torch.where(cols, xs, -big).amax(dim=1) + 1
            out[:, c, 3] = torch.where(rows, ys, -big).amax(dim=1) + 1
            out[:, c, 4] = (mask.flatten(1).sum(dim=1) > 16).to(x.dtype) * 0.9
            out[:, c, 5] = c + self.class_offset
        return out


def color_blob_detector() -> nn.Module:
    return ColorBlobDetector(0).eval()


def shifted_blob_detector() -> nn.Module:
    return ColorBlobDetector(3).eval()


class _OddLayout(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, 7, 3): no family has it ((B, nc) alone is a classifier's, (B, K, 6/7) YOLO's final rows)
        return x.mean(dim=(2, 3)).repeat(1, 7)[:, :, None].expand(-1, -1, 3)[:, :7]


def odd_layout_model() -> nn.Module:
    return _OddLayout()


class _FailsOnThirdBatch(ColorBlobDetector):
    def __init__(self) -> None:
        super().__init__(0)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 4:  # the first call is the warm-up pass at start
            raise RuntimeError("the model broke on its third batch")
        return super().forward(x)


def fails_on_third_batch() -> nn.Module:
    return _FailsOnThirdBatch()


def only_red_postprocess(outputs: list[torch.Tensor], params: object) -> list:
    """A user post-process: the model's end-to-end rows, keeping class 0 only."""
    from inferstream.detections import Detections

    out = []
    for rows in outputs[0]:
        rows = rows[(rows[:, 5] == 0) & (rows[:, 4] > 0.5)]
        out.append(Detections(boxes_xyxy=rows[:, :4].float(), scores=rows[:, 4].float(), labels=rows[:, 5].long()))
    return out


def third_blob_detector() -> nn.Module:
    return ColorBlobDetector(6).eval()


class _FailsAfterWarmup(ColorBlobDetector):
    """Passes loading and warm-up (all-zero dummy batches), then fails on every real frame: what a hot swap must
    survive."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.abs().amax() > 0):
            raise RuntimeError("the model broke on real frames")
        return super().forward(x)


def fails_after_warmup() -> nn.Module:
    return _FailsAfterWarmup(3).eval()
