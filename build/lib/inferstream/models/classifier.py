"""The classifier family: one ``(B, nc)`` output of logits or probabilities -> top-1 class and its probability.

Secondary inference (``inferstream.secondary``) runs it on object crops; as a primary (whole frames) each frame
gets one detection covering the whole frame, labelled with its top-1 class. Preprocessing is torchvision's
ImageNet convention (stretch to the input, bilinear on float RGB, ImageNet mean/std, 224 x 224): pyinfer's
``mean``, ``std`` and ``input-size`` override it for models trained otherwise.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferstream.errors import UnsupportedModelError
from inferstream.models.base import Decoder, Family, Preprocess

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.detections import Detections
    from inferstream.models.base import DecodeParams, Shape

CLASSIFIER_PREPROCESS = Preprocess(resize="stretch", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                                   resample="float", input_size=(224, 224))


def top1(scores: Tensor) -> tuple[Tensor, Tensor]:
    """Top-1 class and its probability per row.

    Rows that already are probabilities (every value in [0, 1], each row summing to 1 within 1e-3) are taken as
    they are; anything else is logits and goes through a softmax. Decided per batch, on the values.

    Args:
        scores (Tensor[B, nc]): logits or probabilities, any floating dtype.

    Returns:
        ``(labels, probs)``: int64 ``Tensor[B]`` and float32 ``Tensor[B]``, on ``scores``' device.
    """
    s = scores.float()
    is_prob = bool(((s >= 0) & (s <= 1)).all()) and bool(((s.sum(1) - 1).abs() <= 1e-3).all())
    probs = s if is_prob else s.softmax(dim=1)
    best, labels = probs.max(dim=1)
    return labels, best


@dataclass(frozen=True, slots=True)
class ClassifierDecoder:
    """Top-1 per image as one whole-input detection (the runner maps it back to the whole frame)."""

    num_classes: int
    input_hw: tuple[int, int]

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        import torch

        from inferstream.detections import Detections

        scores = outputs[0]
        if scores.ndim != 2 or scores.shape[1] != self.num_classes:
            raise ValueError(f"classifier: expected scores (B, {self.num_classes}), got {tuple(scores.shape)}")
        labels, probs = top1(scores)
        h, w = self.input_hw
        boxes = probs.new_zeros((len(probs), 4))  # the whole input, filled on the device (no upload per batch)
        boxes[:, 2], boxes[:, 3] = w, h
        keep = probs >= params.conf
        if params.classes is not None:
            keep &= torch.isin(labels, torch.tensor(params.classes, device=labels.device))
        ids = torch.arange(len(probs), device=probs.device)[keep]
        return ids, Detections(boxes_xyxy=boxes[keep], scores=probs[keep], labels=labels[keep])

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        ids, rows = self.flat(outputs, params)
        return rows.split(ids.bincount(minlength=outputs[0].shape[0]).tolist())


def _classes(shapes: Sequence[Shape]) -> int | None:
    if len(shapes) != 1 or len(shapes[0]) != 2:
        return None
    nc = shapes[0][1]
    return nc if isinstance(nc, int) and nc > 0 else None


def _match(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return info.task in (None, "classify") and _classes(shapes) is not None


def _build(shapes: Sequence[Shape], info: ModelInfo, input_hw: tuple[int, int]) -> Decoder:
    nc = _classes(shapes)
    if nc is None:
        raise UnsupportedModelError(f"classifier: expected one output (B, nc) of class scores, got {list(shapes)}")
    return ClassifierDecoder(nc, input_hw)


FAMILIES = (
    Family("classifier", "one (B, nc) output of logits or probabilities, top-1 per image (secondary: per object); "
           "stretch resize, ImageNet mean/std, 224x224", _match, _build, preprocess=CLASSIFIER_PREPROCESS,
           kinds=frozenset({"classes"})),
)
