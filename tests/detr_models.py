"""DETR-family models as a user's ``path.py:factory`` spec names them, with the reference object they came from.

No trained DETR weights ship in any package we reach: rfdetr builds its networks offline with
``pretrain_weights=None`` (seeded random weights); the test compares against that same object's ``predict``.
"""
from __future__ import annotations

import copy
import functools
from typing import Any

import torch

RFDETR_SEED = 0


@functools.cache
def rfdetr_reference() -> Any:
    """An ``RFDETRNano`` with seeded random weights (the object whose ``predict`` is the reference)."""
    from rfdetr import RFDETRNano

    threads = torch.get_num_threads()
    torch.manual_seed(RFDETR_SEED)
    model = RFDETRNano(pretrain_weights=None)
    torch.set_num_threads(threads)
    return model


def rfdetr_nano() -> torch.nn.Module:
    """The reference's network in rfdetr's export mode: ``forward(images) -> (boxes, logits)``, as its ONNX export."""
    net = copy.deepcopy(rfdetr_reference().model.model).eval()
    net.export()
    return net


@functools.cache
def dfine_reference() -> Any:
    """transformers' D-FINE (default configuration, 10 classes) with seeded random weights, in eval mode."""
    from transformers import DFineConfig, DFineForObjectDetection

    torch.manual_seed(RFDETR_SEED)
    return DFineForObjectDetection(DFineConfig(num_labels=10)).eval()


class _LogitsAndBoxes(torch.nn.Module):
    """A transformers detector as a user hands it to pyinfer: images in, ``(logits, pred_boxes)`` out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(pixel_values=images)
        return out.logits, out.pred_boxes


def dfine() -> torch.nn.Module:
    return _LogitsAndBoxes(copy.deepcopy(dfine_reference()))
