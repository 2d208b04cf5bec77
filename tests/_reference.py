"""Slow, obviously-correct references and ultralytics fixtures shared by tests/ops and tests/models.

Ultralytics (AGPL, optional) is the reference for letterbox geometry, NMS semantics and head layouts; it is
imported lazily so that tests not needing it don't pay for it.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferstream.rawframe import RawFrame

os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "false")
os.environ.setdefault("YOLO_CONFIG_DIR", "/tmp/yolo-cfg")

IMGSZ = (320, 320)  # small model input: keeps the random-weight forwards fast on 2 cores
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def ultralytics() -> Any:
    """The ultralytics package (skips the test when it is not installed); restores torch's thread count."""
    import pytest

    threads = torch.get_num_threads()
    mod = pytest.importorskip("ultralytics")
    torch.set_num_threads(threads)
    return mod


@functools.cache
def bus_bgr() -> np.ndarray:
    """ultralytics' bus.jpg as cv2 reads it: uint8 BGR [1080, 810, 3]."""
    import cv2

    path = Path(ultralytics().__file__).parent / "assets" / "bus.jpg"
    img = cv2.imread(str(path))
    if img is None:
        raise FileNotFoundError(path)
    return img


@functools.cache
def sample_images() -> tuple[np.ndarray, ...]:
    """The images the model tests run: bus.jpg and a crop of it with another aspect ratio (uint8 BGR)."""
    img = bus_bgr()
    return img, np.ascontiguousarray(img[100:700, 50:800])


def bgr_frame(img: np.ndarray) -> RawFrame:
    """A packed BGR RawFrame viewing ``img`` (uint8 [H, W, 3])."""
    return RawFrame("BGR", img.shape[1], img.shape[0], (torch.from_numpy(img),))


def ultralytics_input(img: np.ndarray, size_hw: tuple[int, int]) -> torch.Tensor:
    """What ultralytics' predictor feeds the model: LetterBox(auto=False), BGR→RGB, CHW, /255. [1, 3, H, W]."""
    from ultralytics.data.augment import LetterBox

    boxed = LetterBox(size_hw, auto=False)(image=img)
    return torch.from_numpy(np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1))).float()[None] / 255


@functools.cache
def yolo_model(yaml: str, seed: int = 0) -> torch.nn.Module:
    """A random-weight ultralytics model in eval mode whose outputs depend on its input, without ties.

    A fresh net's activations die out layer by layer (features ~1e-9 at the head: every anchor gets the same
    score). So BatchNorm statistics are calibrated on the letterboxed ``sample_images()``, and each prediction conv
    of the head is rescaled on them (box outputs to spread 0.5, class and angle to 1); class biases ~N(-5, 0.5) then
    put a few dozen anchors per image above conf 0.25, with distinct scores (ties make any NMS order arbitrary).
    """
    ultralytics()
    from ultralytics.nn.tasks import DetectionModel, OBBModel

    threads = torch.get_num_threads()
    torch.manual_seed(seed)
    model = (OBBModel if "-obb" in yaml else DetectionModel)(yaml, verbose=False)  # YOLO(yaml).model, quietly
    torch.set_num_threads(threads)
    head = model.model[-1]
    last = {name: [branch[-1] for branch in getattr(head, name)]
            for name in ("cv2", "cv3", "cv4", "one2one_cv2", "one2one_cv3", "one2one_cv4")
            if getattr(head, name, None) is not None}  # fmt: skip
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 1.0  # running stats := this batch's stats
    x = torch.cat([ultralytics_input(img, IMGSZ) for img in sample_images()])
    with torch.no_grad():
        model.train()(x)
        spread: dict[torch.nn.Module, float] = {}
        hooks = [conv.register_forward_hook(lambda m, i, o: spread.__setitem__(m, float(o.std())))
                 for convs in last.values() for conv in convs]  # fmt: skip
        model.eval()(x)
        for h in hooks:
            h.remove()
    gen = torch.Generator().manual_seed(seed)
    for name, convs in last.items():
        for conv in convs:
            conv.weight.data *= (0.5 if name.endswith("cv2") else 1.0) / spread[conv]
            if name.endswith("cv3"):
                conv.bias.data = torch.randn(conv.bias.shape, generator=gen) * 0.5 - 5.0
            elif name.endswith("cv4"):
                conv.bias.data.zero_()
    return model


@functools.cache
def yolo_raw(yaml: str, end2end: bool = False) -> torch.Tensor:
    """``yolo_model(yaml)``'s raw output on the letterboxed ``sample_images()`` (its one-to-one head if end2end)."""
    model = yolo_model(yaml)
    model.model[-1].end2end = end2end
    return raw_outputs(model, torch.cat([ultralytics_input(img, IMGSZ) for img in sample_images()]))


def raw_outputs(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The decoded head tensor the model returns in eval mode (what an ONNX export returns)."""
    with torch.no_grad():
        out = model(x)
    return out[0] if isinstance(out, (tuple, list)) else out


def reference_nms(pred: torch.Tensor, conf: float, iou: float, **kwargs: Any) -> list[torch.Tensor]:
    """ultralytics' non_max_suppression on a raw/end-to-end output (per image [n, 6(+extra)] rows)."""
    ultralytics()
    from ultralytics.utils.nms import non_max_suppression

    return non_max_suppression(pred.clone(), conf, iou, **kwargs)


def reference_greedy_nms(boxes: torch.Tensor, scores: torch.Tensor, iou: float) -> torch.Tensor:
    """Plain-loop greedy NMS on xyxy boxes (float64 IoU): kept indices by descending score."""
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
    b = boxes.double().tolist()
    kept: list[int] = []
    for i in order:
        if all(_iou(b[i], b[k]) <= iou for k in kept):
            kept.append(i)
    return torch.tensor(kept, dtype=torch.int64)


def _iou(a: list[float], b: list[float]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def yuv_float_reference(y: np.ndarray, u: np.ndarray, v: np.ndarray, matrix: str, full_range: bool) -> np.ndarray:
    """Textbook YUV→RGB in float64 with nearest chroma (u, v already at full resolution): uint8 [H, W, 3]."""
    kr, kb = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}[matrix]
    yf, cb, cr = y.astype(np.float64), u.astype(np.float64) - 128, v.astype(np.float64) - 128
    if not full_range:
        yf, cb, cr = (yf - 16) * 255 / 219, cb * 255 / 224, cr * 255 / 224
    r = yf + 2 * (1 - kr) * cr
    b = yf + 2 * (1 - kb) * cb
    g = (yf - kr * r - kb * b) / (1 - kr - kb)
    return np.clip(np.round(np.stack([r, g, b], -1)), 0, 255).astype(np.uint8)


def random_boxes_xyxy(n: int, n_images: int, n_classes: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Clustered random boxes (so that many overlap): boxes [n, 4], scores [n], labels [n], image_ids [n]."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(8, 2, generator=g) * 200
    ctr = centres[torch.randint(0, 8, (n,), generator=g)] + torch.randn(n, 2, generator=g) * 8
    wh = torch.rand(n, 2, generator=g) * 40 + 10
    boxes = torch.cat((ctr - wh / 2, ctr + wh / 2), 1)
    scores = torch.rand(n, generator=g)
    labels = torch.randint(0, n_classes, (n,), generator=g)
    image_ids = torch.randint(0, n_images, (n,), generator=g)
    return boxes, scores, labels, image_ids
