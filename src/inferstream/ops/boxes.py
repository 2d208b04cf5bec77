"""Box format conversions, one function per conversion; xyxy is the hub format.

Formats (all in pixels, float):
    xyxy: ``(x1, y1, x2, y2)`` corners.
    cxcywh: ``(cx, cy, w, h)`` centre and size.
    xywh: ``(x, y, w, h)`` top-left corner and size (what GstAnalytics' ``add_od_mtd`` takes).
    cxcywhr: ``(cx, cy, w, h, r)`` oriented box: the ``cxcywh`` rectangle rotated by ``r`` radians about its
        centre, clockwise in image coordinates (y down) — ultralytics' OBB ``xywhr``.

Every function takes ``Tensor[..., 4]`` (or ``[..., 5]``) and returns a new tensor of the same dtype and device.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch import Tensor


def _expect_last_dim(boxes: Tensor, name: str, size: int) -> None:
    if boxes.ndim < 1 or boxes.shape[-1] != size or not boxes.is_floating_point():
        raise ValueError(f"{name}: expected a float Tensor[..., {size}], got {boxes.dtype} {tuple(boxes.shape)}")


def cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """Centre/size boxes to corner boxes.

    Args:
        boxes (Tensor[..., 4]): ``(cx, cy, w, h)``, float.

    Returns:
        Tensor[..., 4]: ``(x1, y1, x2, y2)``.

    Raises:
        ValueError: when the last dimension is not 4 or the dtype is not floating point.
    """
    _expect_last_dim(boxes, "boxes", 4)
    ctr, half = boxes[..., :2], boxes[..., 2:] / 2
    return torch.cat((ctr - half, ctr + half), dim=-1)


def xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """Corner boxes to centre/size boxes.

    Args:
        boxes (Tensor[..., 4]): ``(x1, y1, x2, y2)``, float.

    Returns:
        Tensor[..., 4]: ``(cx, cy, w, h)``.

    Raises:
        ValueError: when the last dimension is not 4 or the dtype is not floating point.
    """
    _expect_last_dim(boxes, "boxes", 4)
    p1, p2 = boxes[..., :2], boxes[..., 2:]
    return torch.cat(((p1 + p2) / 2, p2 - p1), dim=-1)


def xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """Corner boxes to top-left/size boxes.

    Args:
        boxes (Tensor[..., 4]): ``(x1, y1, x2, y2)``, float.

    Returns:
        Tensor[..., 4]: ``(x1, y1, w, h)``.

    Raises:
        ValueError: when the last dimension is not 4 or the dtype is not floating point.
    """
    _expect_last_dim(boxes, "boxes", 4)
    p1 = boxes[..., :2]
    return torch.cat((p1, boxes[..., 2:] - p1), dim=-1)


def cxcywhr_to_corners(boxes: Tensor) -> Tensor:
    """Oriented boxes to their four corner points.

    Corner order follows ultralytics' ``xywhr2xyxyxyxy``: ``c + u + v``, ``c + u - v``, ``c - u - v``,
    ``c - u + v`` with ``u = (w/2) (cos r, sin r)`` and ``v = (h/2) (-sin r, cos r)``.

    Args:
        boxes (Tensor[..., 5]): ``(cx, cy, w, h, r)``, pixels and radians (clockwise, y down).

    Returns:
        Tensor[..., 4, 2]: ``(x, y)`` of each corner, pixels.

    Raises:
        ValueError: when the last dimension is not 5 or the dtype is not floating point.
    """
    _expect_last_dim(boxes, "boxes", 5)
    ctr, w, h, r = boxes[..., :2], boxes[..., 2:3], boxes[..., 3:4], boxes[..., 4:5]
    cos, sin = torch.cos(r), torch.sin(r)
    u = torch.cat((w / 2 * cos, w / 2 * sin), dim=-1)
    v = torch.cat((-h / 2 * sin, h / 2 * cos), dim=-1)
    return torch.stack((ctr + u + v, ctr + u - v, ctr - u - v, ctr - u + v), dim=-2)


def cxcywhr_to_envelope_xyxy(boxes: Tensor) -> Tensor:
    """The axis-aligned box that encloses each oriented box.

    Args:
        boxes (Tensor[..., 5]): ``(cx, cy, w, h, r)``, pixels and radians.

    Returns:
        Tensor[..., 4]: ``(x1, y1, x2, y2)`` of the enclosing box, pixels.

    Raises:
        ValueError: when the last dimension is not 5 or the dtype is not floating point.
    """
    _expect_last_dim(boxes, "boxes", 5)
    ctr, w, h, r = boxes[..., :2], boxes[..., 2:3], boxes[..., 3:4], boxes[..., 4:5]
    cos, sin = torch.cos(r).abs(), torch.sin(r).abs()
    half = torch.cat((w / 2 * cos + h / 2 * sin, w / 2 * sin + h / 2 * cos), dim=-1)
    return torch.cat((ctr - half, ctr + half), dim=-1)
