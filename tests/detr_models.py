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
