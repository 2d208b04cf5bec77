"""Decoders for ultralytics YOLO heads: what ``ultralytics.utils.nms.non_max_suppression`` does, batched.

Layouts (first output; boxes in model-input pixels):

- ``AnchorFreeDecoder``: ``(B, 4 + nc, A)`` rows ``cx, cy, w, h, class scores`` — YOLOv5u/v8/v11 and YOLO26's
  one-to-many head. Needs NMS.
- ``EndToEndDecoder``: ``(B, K, 6)`` rows ``x1, y1, x2, y2, score, class`` — YOLO26 / YOLOv10 end-to-end and any
  ``export(nms=True)``. Only filtered.
- ``ObbDecoder``: ``(B, 4 + nc + 1, A)`` rows ``cx, cy, w, h, class scores, angle`` (radians). Rotated NMS.
- ``ObbEndToEndDecoder``: ``(B, K, 7)`` rows ``cx, cy, w, h, score, class, angle`` — YOLO26-OBB end-to-end and
  OBB ``export(nms=True)``. Only filtered.

Semantics (``multi_label=False``): a candidate's score is its best class score and it is kept when that score is
strictly above ``params.conf`` (or its class's ``params.class_conf``) and, if ``params.classes`` is set, its class is listed; at most ``max_nms``
candidates per image (highest scores) enter NMS; NMS is per class unless ``params.agnostic``; at most
``params.max_det`` detections per image, by descending score. End-to-end rows keep the model's order.
Oriented results keep the unrotated box in ``boxes_xyxy`` and the angle, as emitted, in ``angles_rad``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferstream.errors import UnsupportedModelError
from inferstream.models.base import Family, above_conf

if TYPE_CHECKING:  # torch loads when a decoder runs: the family table is read at plugin scan
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.detections import Detections
    from inferstream.models.base import DecodeParams, Decoder, FlatDecoder, Shape

MAX_NMS = 30000  # ultralytics' default cap on candidates per image entering NMS


@dataclass(frozen=True, slots=True)
class AnchorFreeDecoder:
    """``(B, 4 + nc, A)`` raw head → per-class NMS. ``num_classes`` is nc."""

    num_classes: int
    max_nms: int = MAX_NMS

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        from inferstream.ops.boxes import cxcywh_to_xyxy
        from inferstream.ops.nms import nms_xyxy, rank_in_image

        pred = _first(outputs, "yolo", channels=4 + self.num_classes)
        boxes, scores, labels, img = _candidates(pred, self.num_classes, params, self.max_nms)
        boxes = cxcywh_to_xyxy(boxes)
        keep = nms_xyxy(boxes, scores, labels, img, params.iou, params.agnostic)
        keep = keep[rank_in_image(img[keep]) < params.max_det]
        return img[keep], _rows(boxes[keep], scores[keep], labels[keep])


@dataclass(frozen=True, slots=True)
class ObbDecoder:
    """``(B, 4 + nc + 1, A)`` raw OBB head → ultralytics' rotated NMS. ``num_classes`` is nc."""

    num_classes: int
    max_nms: int = MAX_NMS

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        from inferstream.ops.boxes import cxcywh_to_xyxy
        from inferstream.ops.nms import nms_cxcywhr, rank_in_image

        pred = _first(outputs, "yolo-obb", channels=5 + self.num_classes)
        cxcywhr, scores, labels, img = _candidates(pred, self.num_classes, params, self.max_nms, angle=True)
        keep = nms_cxcywhr(cxcywhr, scores, labels, img, params.iou, params.agnostic)
        keep = keep[rank_in_image(img[keep]) < params.max_det]
        kept = cxcywhr[keep]
        return img[keep], _rows(cxcywh_to_xyxy(kept[:, :4]), scores[keep], labels[keep], kept[:, 4])


@dataclass(frozen=True, slots=True)
class EndToEndDecoder:
    """``(B, K, 6)`` final detections ``x1, y1, x2, y2, score, class``. ``num_classes``: 0 when unknown."""

    num_classes: int = 0

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        pred = _first(outputs, "yolo-end2end", width=6)
        img, row = _filter_rows(pred, params)
        sel = pred[img, row].float()
        return img, _rows(sel[:, :4], sel[:, 4], sel[:, 5].long())


@dataclass(frozen=True, slots=True)
class ObbEndToEndDecoder:
    """``(B, K, 7)`` final oriented detections ``cx, cy, w, h, score, class, angle``. ``num_classes``: 0 = unknown."""

    num_classes: int = 0

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        from inferstream.ops.boxes import cxcywh_to_xyxy

        pred = _first(outputs, "yolo-obb-end2end", width=7)
        img, row = _filter_rows(pred, params)
        sel = pred[img, row].float()
        return img, _rows(cxcywh_to_xyxy(sel[:, :4]), sel[:, 4], sel[:, 5].long(), sel[:, 6])


def _first(outputs: list[Tensor], family: str, channels: int | None = None, width: int | None = None) -> Tensor:
    """The first output, checked against the layout ``(B, channels, A)`` or ``(B, K, width)``."""
    if not outputs:
        raise ValueError(f"{family}: expected at least one output tensor, got none")
    pred = outputs[0]
    expected = f"(B, {channels}, A)" if channels is not None else f"(B, K, {width})"
    dim, size = (1, channels) if channels is not None else (2, width)
    if pred.ndim != 3 or pred.shape[dim] != size or not pred.is_floating_point():
        raise ValueError(f"{family}: expected a float output {expected}, got {pred.dtype} {tuple(pred.shape)}")
    return pred


def _candidates(
    pred: Tensor, nc: int, params: DecodeParams, max_nms: int, angle: bool = False, tail: int = 0
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Rows of a ``(B, C, A)`` head above ``conf`` (and in ``classes``), capped at ``max_nms`` per image.

    Returns:
        ``boxes [N, 4]`` cxcywh (``[N, 5]`` cxcywhr with ``angle``; ``[N, 4 + tail]`` with the ``tail`` channels
        after the class scores, e.g. mask coefficients or keypoints) float32, ``scores [N]`` float32,
        ``labels [N]`` int64, ``image_ids [N]`` int64.
    """
    import torch

    from inferstream.ops.nms import by_image_then_score, rank_in_image

    # the best class score of every anchor, then the class of the few above ``conf`` only: ``max(dim=1)`` with
    # indices over all anchors costs many times ``amax`` on the CPU (BENCHMARKS.md, *Figures from the code*)
    conf = pred[:, 4 : 4 + nc].amax(dim=1)  # [B, A]
    img, anchor = (conf > params.min_conf).nonzero(as_tuple=True)
    scores = conf[img, anchor].float()
    labels = pred[img, 4 : 4 + nc, anchor].argmax(dim=1)  # [N, nc] -> the first best class, as max(dim=1) gives
    if params.classes is not None or params.class_conf:
        keep = _keep_classes(above_conf(scores, labels, params), labels, params)
        img, anchor, scores, labels = img[keep], anchor[keep], scores[keep], labels[keep]
    if pred.shape[2] > max_nms:  # only then can one image exceed the cap
        order = by_image_then_score(scores, img)
        capped = order[rank_in_image(img[order]) < max_nms]
        img, anchor, scores, labels = img[capped], anchor[capped], scores[capped], labels[capped]
    boxes = pred[img, :4, anchor].float()
    if angle:
        boxes = torch.cat((boxes, pred[img, 4 + nc, anchor].float()[:, None]), dim=1)
    if tail:
        boxes = torch.cat((boxes, pred[img, 4 + nc : 4 + nc + tail, anchor].float()), dim=1)
    return boxes, scores, labels, img


def _filter_rows(pred: Tensor, params: DecodeParams) -> tuple[Tensor, Tensor]:
    """``(image, row)`` of the end-to-end rows kept: score > conf, class listed, first ``max_det`` per image."""
    import torch

    mask = _keep_classes(above_conf(pred[..., 4], pred[..., 5], params), pred[..., 5], params)
    mask &= torch.cumsum(mask, dim=1) <= params.max_det
    img, row = mask.nonzero(as_tuple=True)
    return img, row


def _keep_classes(mask: Tensor, labels: Tensor, params: DecodeParams) -> Tensor:
    return mask if params.classes is None else mask & _in_classes(labels, params.classes)


def _in_classes(labels: Tensor, classes: tuple[int, ...]) -> Tensor:
    import torch

    return torch.isin(labels, torch.tensor(classes, dtype=labels.dtype, device=labels.device))


def _rows(boxes_xyxy: Tensor, scores: Tensor, labels: Tensor, angles: Tensor | None = None) -> Detections:
    from inferstream.detections import Detections

    return Detections(boxes_xyxy=boxes_xyxy.float(), scores=scores.float(), labels=labels.long(),
                      angles_rad=None if angles is None else angles.float())


def per_image(decoder: FlatDecoder, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
    """A flat decoder's rows as one Detections per image (one host sync for the counts on a device)."""
    import torch

    image_ids, rows = decoder.flat(outputs, params)
    counts = torch.bincount(image_ids, minlength=outputs[0].shape[0]).tolist()
    return rows.split(counts)


# the family table: how each layout is recognised and built ---------------------------------------------------
def _dims(shapes: Sequence[Shape]) -> tuple[int | None, int | None] | None:
    """``(d1, d2)`` of a single 3-D output ``(B, d1, d2)`` (dynamic dims → None); None for anything else."""
    if len(shapes) != 1 or len(shapes[0]) != 3:
        return None
    d1, d2 = (d if isinstance(d, int) and d > 0 else None for d in shapes[0][1:])
    return d1, d2


def _is_rows(shapes: Sequence[Shape], info: ModelInfo, width: int) -> bool:
    """``(B, K, width)`` final detections: K rows wider than ``width``, or the model says it is end-to-end."""
    dims = _dims(shapes)
    return dims is not None and dims[1] == width and (info.end2end is True or (dims[0] or 0) > width)


def _nc(info: ModelInfo) -> int | None:
    return len(info.names) if info.names else None


def _match_detect(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    dims = _dims(shapes)
    if dims is None or dims[0] is None or dims[0] < 5 or _is_rows(shapes, info, 6) or _is_rows(shapes, info, 7):
        return False
    nc = _nc(info)
    if info.task == "detect":  # ultralytics' RT-DETR exports say "detect" too: their rows are (B, Q, 4 + nc)
        return nc is None or dims[1] != 4 + nc or dims[0] == 4 + nc
    if info.task is not None:
        return False
    return dims[0] == 4 + nc if nc is not None else dims[1] is None or dims[0] < dims[1]  # channels < anchors


def _match_obb(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    dims = _dims(shapes)
    if dims is None or dims[0] is None or dims[0] < 6 or _is_rows(shapes, info, 7):
        return False
    nc = _nc(info)
    return info.task == "obb" or (info.task is None and nc is not None and dims[0] == 5 + nc)


def _match_end2end(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return info.task in (None, "detect") and info.extra.get("head") != "rtdetr" and _is_rows(shapes, info, 6)


def _match_obb_end2end(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return info.task in (None, "obb") and _is_rows(shapes, info, 7)


def _channels(family: str, shapes: Sequence[Shape], info: ModelInfo, *, extra: int) -> int:
    """nc of a ``(B, 4 + nc + extra, A)`` head, checked against the model's names when it has them."""
    dims = _dims(shapes)
    if dims is None or dims[0] is None or dims[0] < 5 + extra:
        raise UnsupportedModelError(f"{family}: expected one output (B, {4 + extra} + nc, A), got {list(shapes)}")
    nc, names = dims[0] - 4 - extra, _nc(info)
    if names is not None and names != nc:
        raise UnsupportedModelError(
            f"{family}: expected {4 + extra} + {names} channels for the model's {names} names, got {dims[0]} "
            f"(output {list(shapes)}); is model-family right?"
        )
    return nc


def _expect_rows(family: str, shapes: Sequence[Shape], width: int) -> None:
    if len(shapes) < 1 or len(shapes[0]) != 3 or shapes[0][2] != width:
        raise UnsupportedModelError(f"{family}: expected an output (B, K, {width}), got {list(shapes)}")


def _build_detect(shapes: Sequence[Shape], info: ModelInfo, _input_hw: tuple[int, int]) -> Decoder:
    return AnchorFreeDecoder(_channels("yolo", shapes, info, extra=0))


def _build_obb(shapes: Sequence[Shape], info: ModelInfo, _input_hw: tuple[int, int]) -> Decoder:
    return ObbDecoder(_channels("yolo-obb", shapes, info, extra=1))


def _build_end2end(shapes: Sequence[Shape], info: ModelInfo, _input_hw: tuple[int, int]) -> Decoder:
    _expect_rows("yolo-end2end", shapes, 6)
    return EndToEndDecoder(_nc(info) or 0)


def _build_obb_end2end(shapes: Sequence[Shape], info: ModelInfo, _input_hw: tuple[int, int]) -> Decoder:
    _expect_rows("yolo-obb-end2end", shapes, 7)
    return ObbEndToEndDecoder(_nc(info) or 0)


_ORIENTED = frozenset({"boxes", "oriented"})
FAMILIES = (
    Family("yolo", "(B, 4+nc, A): cx,cy,w,h + class scores, needs NMS (YOLOv5u/v8/v11, YOLO26 one-to-many)",
           _match_detect, _build_detect, any_size=True),
    Family("yolo-end2end", "(B, K, 6): x1,y1,x2,y2,score,class (YOLO26/YOLOv10 end-to-end, export(nms=True))",
           _match_end2end, _build_end2end, any_size=True),
    Family("yolo-obb", "(B, 4+nc+1, A): cx,cy,w,h + class scores + angle, needs rotated NMS (YOLOv8/11/26-OBB)",
           _match_obb, _build_obb, kinds=_ORIENTED, any_size=True),
    Family("yolo-obb-end2end", "(B, K, 7): cx,cy,w,h,score,class,angle (YOLO26-OBB end-to-end, OBB "
           "export(nms=True))", _match_obb_end2end, _build_obb_end2end, kinds=_ORIENTED,
           any_size=True),
)
"""Ultralytics' letterbox (pad 114, /255, cv2 resize): the default Preprocess."""
