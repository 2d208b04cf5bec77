"""Decoders turn one family's raw outputs into per-frame Detections in model-input pixels."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.detections import Detections


@dataclass(frozen=True, slots=True)
class DecodeParams:
    """Thresholds shared by every family (nvinfer's pre-cluster-threshold, nms-iou-threshold, topk)."""

    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    classes: tuple[int, ...] | None = None  # keep only these class ids
    agnostic: bool = False  # NMS across classes


class Decoder(Protocol):
    """One model family's post-processing.

    Args:
        outputs: the backend's raw outputs for a batch of B frames.
        params: thresholds.

    Returns:
        B Detections, boxes in *model-input* pixels (letterboxed space); the runner inverts the letterbox.
    """

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]: ...


class FlatDecoder(Decoder, Protocol):
    """A decoder that can also return the whole batch's rows at once: the built-in ones do, so the runner copies
    them to the host in one piece and splits them there, with no per-image work on the device.

    Returns (``flat``):
        ``(image_ids [N] int64, rows)``: the rows of every image, grouped by image in batch order; boxes in
        model-input pixels.
    """

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]: ...
