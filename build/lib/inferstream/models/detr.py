"""DETR-style detectors: a fixed set of object queries, boxes normalised to the input, no NMS.

Layouts (``Q`` queries, ``C`` classes):

- ``DetrDecoder`` (family ``detr``): two outputs, boxes ``(B, Q, 4)`` as cx, cy, w, h in [0, 1] of the input and
  class logits ``(B, Q, C)``, in either order (the box output is the one whose last dimension is 4; where both are,
  the output names decide). Scores are ``sigmoid(logits)``; of each image the ``top_k`` best (query, class) pairs
  are kept by descending score, ties by ascending flat index — rfdetr's ``PostProcess`` (and transformers'
  ``post_process_object_detection`` for RT-DETR / D-FINE, whose k is Q). RF-DETR's ONNX export (``dets``,
  ``labels``), its torch model in export mode (``boxes, logits``), transformers' RT-DETR / D-FINE / DEIM heads
  (``logits``, ``pred_boxes``).
- ``RtDetrDecoder`` (family ``rtdetr``): ultralytics' RT-DETR, one output of either layout: ``(B, K, 6)`` rows
  cx, cy, w, h in [0, 1], score, class (ultralytics >= 8.4: the head has already taken the top K of queries x
  classes; the model's metadata or head says it is an RT-DETR, which tells these rows from YOLO end-to-end's), or
  ``(B, Q, 4 + nc)`` boxes and class scores (earlier exports: a query's score is its best class). Rows keep the
  model's order (ultralytics' ``RTDETRPredictor``).

Both keep a detection when its score is strictly above ``params.conf`` (or its class's ``params.class_conf``)
and its class is listed in ``params.classes`` (if set), at most ``params.max_det`` per image. Boxes come out in model-input pixels; these
families stretch the frame over the whole input (``Preprocess.resize="stretch"``), so the runner's inverse maps
them onto the frame exactly as the families' own ``target_sizes`` scaling does.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferstream.errors import UnsupportedModelError
from inferstream.models.base import IMAGENET, Family, Preprocess, above_conf

if TYPE_CHECKING:  # torch loads when a decoder runs: the family table is read at plugin scan
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.detections import Detections
    from inferstream.models.base import DecodeParams, Decoder, Shape

TOP_K = 300  # rfdetr's num_select


@dataclass(frozen=True, slots=True)
class DetrDecoder:
    """Boxes ``(B, Q, 4)`` + logits ``(B, Q, C)`` → sigmoid top-k. ``num_classes`` is C."""

    num_classes: int
    input_hw: tuple[int, int]
    boxes_at: int = 0  # which output holds the boxes (the other of the first two: the logits)
    top_k: int = TOP_K

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        from inferstream.models.yolo import per_image

        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        import torch

        boxes, logits = _pair(outputs, self.boxes_at, self.num_classes)
        b, q, c = logits.shape
        prob = logits.float().sigmoid().reshape(b, q * c)
        order = torch.argsort(prob, dim=1, descending=True, stable=True)[:, : min(self.top_k, q * c)]
        scores = prob.gather(1, order)
        img, col = _kept(scores, order % c, params)
        flat_index = order[img, col]
        chosen = boxes[img, flat_index // c].float()
        return img, _rows(chosen, scores[img, col], flat_index % c, self.input_hw)


@dataclass(frozen=True, slots=True)
class RtDetrDecoder:
    """Ultralytics RT-DETR: ``(B, K, 6)`` rows (``rows=True``) or ``(B, Q, 4 + nc)`` scores. ``num_classes``: nc
    (0 when the rows do not tell)."""

    num_classes: int
    input_hw: tuple[int, int]
    rows: bool = False

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        from inferstream.models.yolo import per_image

        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        width = 6 if self.rows else 4 + self.num_classes
        if not outputs or outputs[0].ndim != 3 or outputs[0].shape[2] != width:
            got = tuple(outputs[0].shape) if outputs else "no output"
            raise ValueError(f"rtdetr: expected an output (B, Q, {width}), got {got}")
        pred = outputs[0]
        if self.rows:
            best, labels = pred[..., 4].float(), pred[..., 5].round().long()
        else:
            best, labels = pred[..., 4:].float().max(dim=2)  # [B, Q]
        img, query = _kept(best, labels, params)
        return img, _rows(pred[img, query, :4].float(), best[img, query], labels[img, query], self.input_hw)


def _pair(outputs: list[Tensor], boxes_at: int, num_classes: int) -> tuple[Tensor, Tensor]:
    """The ``(boxes, logits)`` of a DETR's outputs, checked."""
    if len(outputs) < 2:
        raise ValueError(f"detr: expected two outputs (boxes (B, Q, 4), logits (B, Q, C)), got {len(outputs)}")
    boxes, logits = outputs[boxes_at], outputs[1 - boxes_at]
    if (boxes.ndim != 3 or logits.ndim != 3 or boxes.shape[:2] != logits.shape[:2] or boxes.shape[2] != 4
            or logits.shape[2] != num_classes):
        raise ValueError(f"detr: expected boxes (B, Q, 4) and logits (B, Q, {num_classes}), got "
                         f"{tuple(boxes.shape)} and {tuple(logits.shape)}")
    return boxes, logits


def _kept(scores: Tensor, labels: Tensor, params: DecodeParams) -> tuple[Tensor, Tensor]:
    """``(image, column)`` of the candidates kept: above conf, class listed, the first ``max_det`` of each image."""
    import torch

    mask = above_conf(scores, labels, params)
    if params.classes is not None:
        mask &= torch.isin(labels, torch.tensor(params.classes, dtype=labels.dtype, device=labels.device))
    mask &= torch.cumsum(mask, dim=1) <= params.max_det
    img, col = mask.nonzero(as_tuple=True)
    return img, col


def _rows(cxcywh: Tensor, scores: Tensor, labels: Tensor, input_hw: tuple[int, int]) -> Detections:
    """Normalised cx, cy, w, h → Detections in model-input pixels."""
    from inferstream.detections import Detections
    from inferstream.ops.boxes import cxcywh_to_xyxy

    h, w = input_hw
    xyxy = cxcywh_to_xyxy(cxcywh)
    xyxy[:, 0::2] *= w  # by Python numbers: a [w, h, w, h] tensor would be one more upload per batch on CUDA
    xyxy[:, 1::2] *= h
    return Detections(boxes_xyxy=xyxy, scores=scores.float(), labels=labels.long())


# the family table ---------------------------------------------------------------------------------------------
_BOX_NAMES = ("box", "dets", "bbox")


def _size(d: int | None) -> int | None:
    return d if isinstance(d, int) and d > 0 else None


def _boxes_index(shapes: Sequence[Shape], info: ModelInfo) -> int | None:
    """Which of the first two outputs holds a DETR's boxes (None: they are not boxes + logits)."""
    if len(shapes) < 2 or len(shapes[0]) != 3 or len(shapes[1]) != 3:
        return None
    (q0, w0), (q1, w1) = ((_size(s[1]), _size(s[2])) for s in shapes[:2])
    if q0 != q1 or q0 is None or w0 is None or w1 is None:
        return None
    if w0 == 4 and w1 == 4:  # four classes: only the names can tell
        names = info.extra.get("output_names", "").lower().split(",")[:2]
        hits = [i for i, n in enumerate(names) if any(key in n for key in _BOX_NAMES)]
        return hits[0] if len(hits) == 1 else None
    return 0 if w0 == 4 else 1 if w1 == 4 else None


def _match_detr(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return info.task in (None, "detect") and _boxes_index(shapes, info) is not None


def _build_detr(shapes: Sequence[Shape], info: ModelInfo, input_hw: tuple[int, int]) -> Decoder:
    at = _boxes_index(shapes, info)
    if at is None:
        raise UnsupportedModelError(f"detr: expected outputs boxes (B, Q, 4) and logits (B, Q, C), got {list(shapes)}")
    nc = _size(shapes[1 - at][2])
    if nc is None:
        raise UnsupportedModelError(f"detr: the logits' class dimension must be fixed, got {list(shapes)}")
    return DetrDecoder(nc, input_hw, boxes_at=at)


def _rtdetr_classes(shapes: Sequence[Shape], info: ModelInfo) -> int | None:
    """nc of a single ``(B, Q, 4 + nc)`` output (with the model's names, their count must fit); for the
    ``(B, K, 6)`` rows of a model that says it is an RT-DETR, its names' count (0 without names)."""
    if len(shapes) != 1 or len(shapes[0]) != 3:
        return None
    q, width = _size(shapes[0][1]), _size(shapes[0][2])
    if q is None or width is None or width < 5:
        return None
    if width == 6 and info.extra.get("head") == "rtdetr":
        return len(info.names or ())
    if info.names:
        return width - 4 if width == 4 + len(info.names) else None
    return width - 4 if q > width >= 8 else None  # 6 and 7 wide rows are YOLO end-to-end


def _match_rtdetr(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return info.task in (None, "detect") and _rtdetr_classes(shapes, info) is not None


def _build_rtdetr(shapes: Sequence[Shape], info: ModelInfo, input_hw: tuple[int, int]) -> Decoder:
    nc = _rtdetr_classes(shapes, info)
    if nc is None:
        names = f" for the model's {len(info.names)} names" if info.names else ""
        raise UnsupportedModelError(f"rtdetr: expected one output (B, Q, 4 + nc){names}, got {list(shapes)}")
    rows = shapes[0][2] == 6 and info.extra.get("head") == "rtdetr"
    return RtDetrDecoder(nc, input_hw, rows=rows)


FAMILIES = (
    Family("detr", "boxes (B, Q, 4) normalised cx,cy,w,h + logits (B, Q, C), sigmoid top-k, no NMS (RF-DETR, "
           "transformers RT-DETR / D-FINE / DEIM); stretch resize, ImageNet mean/std",
           _match_detr, _build_detr, preprocess=IMAGENET),
    Family("rtdetr", "(B, K, 6) normalised cx,cy,w,h,score,class, or (B, Q, 4+nc) normalised cx,cy,w,h + class "
           "scores, no NMS (ultralytics RT-DETR); stretch resize, /255", _match_rtdetr, _build_rtdetr,
           preprocess=Preprocess(resize="stretch")),
)
