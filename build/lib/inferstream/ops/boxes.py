"""Box format conversions, one function per conversion, for torch tensors and numpy arrays alike; xyxy is the hub.

Formats (all in pixels):
    xyxy: ``(x1, y1, x2, y2)`` corners.
    cxcywh: ``(cx, cy, w, h)`` centre and size.
    xywh: ``(x, y, w, h)`` top-left corner and size (what GstAnalytics' ``add_od_mtd`` takes).
    cxcywhr: ``(cx, cy, w, h, r)`` oriented box: the ``cxcywh`` rectangle rotated by ``r`` radians about its
        centre, clockwise in image coordinates (y down) — ultralytics' OBB ``xywhr``. ``Detections`` keeps an
        oriented box as its unrotated ``xyxy`` plus the angle (``rotated_envelope_xyxy`` takes that form).

Every function takes ``[..., 4]`` (or ``[..., 5]``) boxes — a Tensor (the decoders, on the model's device) or a
numpy array (the trackers, the metadata writer and the drawing, on the host) — and returns a new array of the
same kind, shape and float dtype. One body serves both: numpy and torch share these operations' names. The one
exception is numpy's centre/size <-> corners, one small matrix product each: the trackers convert boxes several
times per frame and numpy's per-call overhead, not the arithmetic, is their cost. Every coefficient is 0, +-1/2
or +-1, so each output is the same correctly rounded sum of two exact terms as the elementwise formula (finite
boxes).
"""
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

Boxes = TypeVar("Boxes", "Tensor", "np.ndarray[Any, Any]")

_XYXY_TO_CXCYWH = np.array([[0.5, 0.0, -1.0, 0.0], [0.0, 0.5, 0.0, -1.0], [0.5, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 1.0]])
_CXCYWH_TO_XYXY = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [-0.5, 0.0, 0.5, 0.0], [0.0, -0.5, 0.0, 0.5]])


def _xp(boxes: Any, width: int, *, floats: bool = True) -> ModuleType:
    """numpy or torch, whichever ``boxes`` belongs to, once their shape and dtype are checked.

    Raises:
        ValueError: when the last dimension is not ``width`` or (``floats``) the dtype is not floating point.
    """
    xp: ModuleType
    if isinstance(boxes, np.ndarray):
        xp, is_float = np, boxes.dtype.kind == "f"
    else:
        import torch

        xp, is_float = torch, boxes.is_floating_point()
    if boxes.ndim < 1 or boxes.shape[-1] != width or (floats and not is_float):
        dtype = f"numpy.{boxes.dtype}" if xp is np else str(boxes.dtype)  # the message only: not per call
        raise ValueError(f"boxes: expected a float array[..., {width}], got {dtype} {tuple(boxes.shape)}")
    return xp


def cxcywh_to_xyxy(boxes: Boxes) -> Boxes:
    """Centre/size boxes ``(cx, cy, w, h)`` to corner boxes ``(x1, y1, x2, y2)``.

    Raises:
        ValueError: when the last dimension is not 4 or the dtype is not floating point.
    """
    b: Any = boxes
    xp = _xp(b, 4)
    if xp is np:
        return cast("Boxes", b.dot(_CXCYWH_TO_XYXY.astype(b.dtype, copy=False)))
    ctr, half = b[..., :2], b[..., 2:] / 2
    return cast("Boxes", xp.concatenate((ctr - half, ctr + half), axis=-1))


def xyxy_to_cxcywh(boxes: Boxes) -> Boxes:
    """Corner boxes ``(x1, y1, x2, y2)`` to centre/size boxes ``(cx, cy, w, h)``.

    Raises:
        ValueError: when the last dimension is not 4 or the dtype is not floating point.
    """
    b: Any = boxes
    xp = _xp(b, 4)
    if xp is np:
        return cast("Boxes", b.dot(_XYXY_TO_CXCYWH.astype(b.dtype, copy=False)))
    p1, p2 = b[..., :2], b[..., 2:]
    return cast("Boxes", xp.concatenate(((p1 + p2) / 2, p2 - p1), axis=-1))


def xyxy_to_xywh(boxes: Boxes) -> Boxes:
    """Corner boxes to top-left/size boxes ``(x1, y1, w, h)``; integer boxes too (the metadata writer's rounded
    edges): the subtraction is exact in any dtype.

    Raises:
        ValueError: when the last dimension is not 4.
    """
    b: Any = boxes
    xywh = b.copy() if _xp(b, 4, floats=False) is np else b.clone()
    xywh[..., 2:] -= b[..., :2]
    return cast("Boxes", xywh)


def cxcywhr_to_corners(boxes: Boxes) -> Boxes:
    """Oriented boxes to their four corner points, ``[..., 4, 2]`` ``(x, y)``.

    Corner order follows ultralytics' ``xywhr2xyxyxyxy``: ``c + u + v``, ``c + u - v``, ``c - u - v``,
    ``c - u + v`` with ``u = (w/2) (cos r, sin r)`` and ``v = (h/2) (-sin r, cos r)``: consecutive corners share an
    edge, so the four make a closed outline.

    Raises:
        ValueError: when the last dimension is not 5 or the dtype is not floating point.
    """
    b: Any = boxes
    xp = _xp(b, 5)
    ctr, w, h, r = b[..., :2], b[..., 2:3], b[..., 3:4], b[..., 4:5]
    cos, sin = xp.cos(r), xp.sin(r)
    u = xp.concatenate((w / 2 * cos, w / 2 * sin), axis=-1)
    v = xp.concatenate((-h / 2 * sin, h / 2 * cos), axis=-1)
    return cast("Boxes", xp.stack((ctr + u + v, ctr + u - v, ctr - u - v, ctr - u + v), axis=-2))


def rotated_envelope_xyxy(boxes_xyxy: Boxes, angles_rad: Boxes | None) -> Boxes:
    """The axis-aligned box that encloses each rotated box (the same centre).

    Args:
        boxes_xyxy: ``[..., 4]`` the *unrotated* rectangles; each rotates about its centre.
        angles_rad: ``[...]`` rotations in radians, or None (axis-aligned: a copy of the boxes comes back).

    Raises:
        ValueError: when the last dimension is not 4 or the dtype is not floating point.
    """
    b: Any = boxes_xyxy
    xp = _xp(b, 4)
    if angles_rad is None:
        return cast("Boxes", b.copy() if xp is np else b.clone())
    a: Any = angles_rad
    x1, y1, x2, y2 = (b[..., i] for i in range(4))
    cx, cy, w, h = (x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1
    c, s = xp.abs(xp.cos(a)), xp.abs(xp.sin(a))
    ex, ey = (w * c + h * s) / 2, (w * s + h * c) / 2
    return cast("Boxes", xp.stack((cx - ex, cy - ey, cx + ex, cy + ey), axis=-1))
