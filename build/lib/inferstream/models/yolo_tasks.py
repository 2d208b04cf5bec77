"""Decoders for ultralytics YOLO segmentation and pose heads: the detect family's candidates and NMS, plus the extra
channels of each kept row.

Layouts (boxes in model-input pixels):

- ``SegDecoder``: ``(B, 4 + nc + C, A)`` rows ``cx, cy, w, h, class scores, C mask coefficients`` plus the
  prototypes ``(B, C, mh, mw)`` (YOLOv8/11-seg, YOLO26-seg one-to-many), or end-to-end ``(B, K, 6 + C)`` rows
  ``x1, y1, x2, y2, score, class, coefficients`` (YOLO26-seg). Masks are assembled after the boxes reach frame
  pixels (``ops.masks``), so the decoder hands out the coefficients of each kept row (``flat_masked``).
- ``PoseDecoder``: ``(B, 4 + nc + K*D, A)`` rows ``cx, cy, w, h, class scores, K keypoints of D values``
  (``x, y[, score]``, ``kpt_shape`` from the model's metadata, COCO's 17 x 3 by default), or end-to-end
  ``(B, K', 6 + K*D)`` (YOLO26-pose). Keypoints ride in ``Detections.keypoints`` ``(N, K, 3)``; D = 2 gets score 1.
"""
from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from inferstream.errors import UnsupportedModelError
from inferstream.models.base import Family
from inferstream.models.yolo import MAX_NMS, _candidates, _filter_rows, _nc, _rows, per_image

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.detections import Detections
    from inferstream.models.base import DecodeParams, Decoder, Shape

COCO_KPT_SHAPE = (17, 3)


@dataclass(frozen=True, slots=True)
class SegDecoder:
    """Instance segmentation: boxes as the detect family, and each kept row's ``mask_dim`` coefficients."""

    num_classes: int
    mask_dim: int = 32
    end2end: bool = False
    max_nms: int = MAX_NMS

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        image_ids, rows, _ = self.flat_masked(outputs, params)
        return image_ids, rows

    def flat_masked(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections, Tensor]:
        """``(image_ids, rows, coefficients [N, mask_dim] float32)`` of the kept rows (masks come later)."""
        pred, _ = self.split_outputs(outputs)
        return _decode_tail(pred, self.num_classes, self.mask_dim, self.end2end, params, self.max_nms)

    def split_outputs(self, outputs: list[Tensor]) -> tuple[Tensor, Tensor]:
        """``(predictions, prototypes)``: the 3-D output and the 4-D one, in whichever order the model lists them."""
        preds = [t for t in outputs if t.ndim == 3]
        protos = [t for t in outputs if t.ndim == 4]
        if len(preds) != 1 or len(protos) != 1 or protos[0].shape[1] != self.mask_dim:
            raise ValueError(f"yolo-seg: expected a (B, N, A) output and prototypes (B, {self.mask_dim}, mh, mw), "
                             f"got {[tuple(t.shape) for t in outputs]}")
        return preds[0], protos[0]


@dataclass(frozen=True, slots=True)
class PoseDecoder:
    """Keypoints: boxes as the detect family, and each kept row's ``kpt_shape`` values in model-input pixels."""

    num_classes: int
    kpt_shape: tuple[int, int] = COCO_KPT_SHAPE
    end2end: bool = False
    max_nms: int = MAX_NMS

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        return per_image(self, outputs, params)

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]:
        import torch

        if len(outputs) != 1 or outputs[0].ndim != 3:
            raise ValueError(f"yolo-pose: expected one output (B, N, A), got {[tuple(t.shape) for t in outputs]}")
        k, d = self.kpt_shape
        image_ids, rows, tail = _decode_tail(outputs[0], self.num_classes, k * d, self.end2end, params,
                                             self.max_nms)
        kpts = tail.view(-1, k, d)
        if d == 2:  # no visibility channel: every keypoint counts as seen
            kpts = torch.cat((kpts, kpts.new_ones((len(kpts), k, 1))), dim=2)
        return image_ids, replace(rows, keypoints=kpts[:, :, :3].contiguous())


def _decode_tail(pred: Tensor, nc: int, tail: int, end2end: bool, params: DecodeParams,
                 max_nms: int) -> tuple[Tensor, Detections, Tensor]:
    """The detect family's rows of ``pred`` and the ``tail`` channels after the class part of each kept row."""
    from inferstream.ops.boxes import cxcywh_to_xyxy
    from inferstream.ops.nms import nms_xyxy, rank_in_image

    if end2end:
        img, row = _filter_rows(pred, params)
        sel = pred[img, row].float()
        return img, _rows(sel[:, :4], sel[:, 4], sel[:, 5].long()), sel[:, 6 : 6 + tail]
    boxes, scores, labels, img = _candidates(pred, nc, params, max_nms, tail=tail)
    xyxy = cxcywh_to_xyxy(boxes[:, :4])
    keep = nms_xyxy(xyxy, scores, labels, img, params.iou, params.agnostic)
    keep = keep[rank_in_image(img[keep]) < params.max_det]
    return img[keep], _rows(xyxy[keep], scores[keep], labels[keep]), boxes[keep, 4:]


# the family table ----------------------------------------------------------------------------------------------
def _pred_dims(shapes: Sequence[Shape]) -> tuple[int | None, int | None] | None:
    """``(d1, d2)`` of the one 3-D output among ``shapes`` (dynamic dims → None); None when there is not one."""
    three = [s for s in shapes if len(s) == 3]
    if len(three) != 1:
        return None
    d1, d2 = (d if isinstance(d, int) and d > 0 else None for d in three[0][1:])
    return d1, d2


def _protos(shapes: Sequence[Shape]) -> list[Shape]:
    return [s for s in shapes if len(s) == 4]


def kpt_shape(info: ModelInfo) -> tuple[int, int] | None:
    """``(K, D)`` from the model's ``kpt_shape`` metadata; None when it has none."""
    raw = info.extra.get("kpt_shape")
    if raw is None:
        return None
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = None
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)
            and value[1] in (2, 3)):
        raise UnsupportedModelError(f"yolo-pose: kpt_shape {raw!r} in the model's metadata: expected [K, 2] or [K, 3]")
    return int(value[0]), int(value[1])


def _match_seg(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    """A segment task always picks this family (so a model without prototypes hears why in ``_build_seg``)."""
    return info.task == "segment" or (info.task is None and _pred_dims(shapes) is not None
                                      and len(_protos(shapes)) == 1 and len(shapes) == 2)


def _match_pose(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return len(shapes) == 1 and _pred_dims(shapes) is not None and (
        info.task == "pose" or (info.task is None and "kpt_shape" in info.extra))


def _is_end2end(dims: tuple[int | None, int | None], info: ModelInfo, width: int) -> bool:
    """Rows ``(B, K, 6 + extra)`` rather than a raw head ``(B, 4 + nc + extra, A)``."""
    return bool(info.end2end) or (dims[1] == width and (dims[0] is None or dims[0] > width))


def _raw_classes(family: str, channels: int | None, extra: int, info: ModelInfo, shapes: Sequence[Shape]) -> int:
    """nc of a raw ``(B, 4 + nc + extra, A)`` head, checked against the model's names when it has them."""
    if channels is None or channels < 5 + extra:
        raise UnsupportedModelError(f"{family}: expected a first output (B, 4 + nc + {extra}, A) with nc >= 1, got "
                                    f"{list(shapes)}")
    nc, names = channels - 4 - extra, _nc(info)
    if names is not None and names != nc:
        raise UnsupportedModelError(f"{family}: expected 4 + {names} + {extra} channels for the model's {names} "
                                    f"names, got {channels} (outputs {list(shapes)})")
    return nc


def _build_seg(shapes: Sequence[Shape], info: ModelInfo, _input_hw: tuple[int, int]) -> Decoder:
    dims, protos = _pred_dims(shapes), _protos(shapes)
    if dims is None or len(protos) != 1:
        raise UnsupportedModelError(
            f"yolo-seg: expected a detection output (B, 4 + nc + 32, A) and mask prototypes (B, 32, mh, mw), got "
            f"outputs {list(shapes)}: a segmentation model needs its prototypes output")
    mask_dim = protos[0][1]
    if not isinstance(mask_dim, int) or mask_dim < 1:
        raise UnsupportedModelError(f"yolo-seg: prototypes {protos[0]} need a fixed channel count")
    if _is_end2end(dims, info, 6 + mask_dim):
        return SegDecoder(_nc(info) or 0, mask_dim, end2end=True)
    return SegDecoder(_raw_classes("yolo-seg", dims[0], mask_dim, info, shapes), mask_dim)


def _build_pose(shapes: Sequence[Shape], info: ModelInfo, _input_hw: tuple[int, int]) -> Decoder:
    dims = _pred_dims(shapes)
    if dims is None or len(shapes) != 1:
        raise UnsupportedModelError(f"yolo-pose: expected one output (B, 4 + nc + K*3, A), got {list(shapes)}")
    k, d = kpt_shape(info) or COCO_KPT_SHAPE
    if _is_end2end(dims, info, 6 + k * d):
        if dims[1] is not None and dims[1] != 6 + k * d:
            raise UnsupportedModelError(f"yolo-pose: end-to-end rows of {dims[1]} values do not hold 6 + {k}x{d} "
                                        f"keypoint values (output {list(shapes)}, kpt_shape [{k}, {d}])")
        return PoseDecoder(_nc(info) or 0, (k, d), end2end=True)
    channels, names, declared = dims[0], _nc(info), kpt_shape(info)
    if channels is not None and names is not None and declared is None:  # K from what the names leave over
        rest = channels - 4 - names
        if rest < d or rest % d:
            raise UnsupportedModelError(f"yolo-pose: output {list(shapes)} leaves {rest} channels after 4 box + "
                                        f"{names} class channels, not a whole number of (x, y, score) keypoints")
        k = rest // d
    elif channels is not None and (channels - 4 - k * d) < 1:
        raise UnsupportedModelError(f"yolo-pose: {channels} channels of output {list(shapes)} do not hold 4 box + "
                                    f"classes + {k}x{d} keypoint values (kpt_shape [{k}, {d}])")
    nc = _raw_classes("yolo-pose", channels, k * d, info, shapes)
    return PoseDecoder(nc, (k, d))


FAMILIES = (
    Family("yolo-seg", "(B, 4+nc+32, A) + prototypes (B, 32, mh, mw): boxes + mask coefficients, needs NMS; or "
           "end-to-end (B, K, 6+32) + prototypes (YOLOv8/11/26-seg)", _match_seg, _build_seg,
           kinds=frozenset({"boxes", "masks"})),
    Family("yolo-pose", "(B, 4+nc+K*3, A): boxes + K keypoints (kpt_shape from metadata, COCO-17 default), needs "
           "NMS; or end-to-end (B, K', 6+K*3) (YOLOv8/11/26-pose)", _match_pose, _build_pose,
           kinds=frozenset({"boxes", "keypoints"})),
)
