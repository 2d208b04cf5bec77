"""Box geometry the trackers need, on numpy (trackers run on the host, after the one device-to-host copy)."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# Box conversions as one small matrix product each: the trackers convert boxes several times per frame and numpy's
# per-call overhead, not the arithmetic, is their cost. Every coefficient is 0, +-1/2 or +-1, so each output is
# the same correctly rounded sum of two exact terms as the elementwise formula (for finite boxes).
_XYXY_TO_CXCYWH = np.array([[0.5, 0.0, -1.0, 0.0], [0.0, 0.5, 0.0, -1.0], [0.5, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 1.0]])
_CXCYWH_TO_XYXY = np.array([[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [-0.5, 0.0, 0.5, 0.0], [0.0, -0.5, 0.0, 0.5]])


def iou_matrix_xyxy(boxes1: FloatArray, boxes2: FloatArray) -> FloatArray:
    """Pairwise IoU of two sets of axis-aligned boxes.

    Args:
        boxes1 (ndarray[N, 4]): ``(x1, y1, x2, y2)`` in pixels.
        boxes2 (ndarray[M, 4]): ``(x1, y1, x2, y2)`` in pixels.

    Returns:
        ndarray[N, M] float64: IoU in [0, 1]; 0 where the union is empty (degenerate boxes).
    """
    b1 = np.asarray(boxes1, dtype=np.float64).reshape(-1, 4)
    b2 = np.asarray(boxes2, dtype=np.float64).reshape(-1, 4)
    return iou_matrix_columns(np.concatenate([b1, b2]).T, len(b1))


def iou_matrix_columns(boxes_xyxy: FloatArray, n: int) -> FloatArray:
    """``iou_matrix_xyxy`` of the first ``n`` boxes against the others, all given as columns.

    The trackers' layout: with both sets in one array, each step is one numpy call (numpy's per-call overhead, not
    the arithmetic, is the cost at tens of boxes).

    Args:
        boxes_xyxy (ndarray[4, N + M]): rows ``x1, y1, x2, y2`` in pixels, one column per box.
        n: how many of the boxes (the first columns) make the first set.

    Returns:
        ndarray[N, M] float64: IoU in [0, 1]; 0 where the union is empty (degenerate boxes).
    """
    edges = np.ascontiguousarray(boxes_xyxy, dtype=np.float64)  # numpy broadcasts slowly over strided rows
    wh = np.maximum(edges[2:] - edges[:2], 0.0)
    area = wh[0] * wh[1]
    first, second = edges[:, :n, None], edges[:, None, n:]
    overlap = np.minimum(first[2:], second[2:])  # [2, N, M]: widths, heights
    overlap -= np.maximum(first[:2], second[:2])
    np.maximum(overlap, 0.0, out=overlap)
    inter = overlap[0] * overlap[1]
    union = np.add.outer(area[:n], area[n:])
    union -= inter
    iou: FloatArray = np.divide(inter, union, out=np.zeros(inter.shape), where=union > 0)
    return iou


def envelope_xyxy(boxes_xyxy: FloatArray, angles_rad: FloatArray | None) -> FloatArray:
    """Axis-aligned envelope of rotated rectangles (the box that encloses the rotated corners).

    Args:
        boxes_xyxy (ndarray[N, 4]): the *unrotated* rectangle ``(x1, y1, x2, y2)``; it rotates about its centre.
        angles_rad (ndarray[N] | None): rotation in radians; ``None`` means axis-aligned (boxes returned as-is).

    Returns:
        ndarray[N, 4] float64: ``(x1, y1, x2, y2)`` of the envelope, same centre as the input.
    """
    b = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    if angles_rad is None:
        return b.copy()
    a = np.asarray(angles_rad, dtype=np.float64).reshape(-1)
    cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    c, s = np.abs(np.cos(a)), np.abs(np.sin(a))
    ex, ey = (w * c + h * s) / 2, (w * s + h * c) / 2
    return np.stack([cx - ex, cy - ey, cx + ex, cy + ey], axis=1)


def xyxy_to_cxcywh(boxes: FloatArray) -> FloatArray:
    """``(x1, y1, x2, y2)`` [N, 4] to ``(cx, cy, w, h)`` [N, 4], pixels."""
    cxcywh: FloatArray = np.asarray(boxes, dtype=np.float64).reshape(-1, 4).dot(_XYXY_TO_CXCYWH)
    return cxcywh


def cxcywh_to_xyxy(boxes: FloatArray) -> FloatArray:
    """``(cx, cy, w, h)`` [N, 4] to ``(x1, y1, x2, y2)`` [N, 4], pixels."""
    xyxy: FloatArray = np.asarray(boxes, dtype=np.float64).reshape(-1, 4).dot(_CXCYWH_TO_XYXY)
    return xyxy


def slack_iou_matrix(boxes1_cxcywh: FloatArray, slack1_xy: FloatArray, boxes2_cxcywh: FloatArray) -> FloatArray:
    """Pairwise IoU after moving each box of set 1 towards each box of set 2 by up to its slack.

    The best IoU a box of uncertain position can reach: with zero slack this is the plain IoU; a track coasting
    through an occlusion gets a slack of a few standard deviations of its predicted centre.

    Args:
        boxes1_cxcywh (ndarray[N, 4]): ``(cx, cy, w, h)``, pixels.
        slack1_xy (ndarray[N, 2]): how far each box of set 1 may move along x and along y, pixels, >= 0.
        boxes2_cxcywh (ndarray[M, 4]): ``(cx, cy, w, h)``, pixels.

    Returns:
        ndarray[N, M] float64: IoU in [0, 1].
    """
    b1 = np.asarray(boxes1_cxcywh, dtype=np.float64).reshape(-1, 4)
    b2 = np.asarray(boxes2_cxcywh, dtype=np.float64).reshape(-1, 4)
    slack = np.asarray(slack1_xy, dtype=np.float64).reshape(-1, 2)
    # ufuncs rather than np.clip: its Python wrapper costs more than the arithmetic at tens of boxes
    offset = np.maximum(np.abs(b1[:, None, :2] - b2[None, :, :2]) - slack[:, None, :], 0.0)  # [N, M, 2]
    size1, size2 = np.maximum(b1[:, None, 2:], 0.0), np.maximum(b2[None, :, 2:], 0.0)
    overlap = np.maximum(np.minimum((size1 + size2) / 2 - offset, np.minimum(size1, size2)), 0.0)  # [N, M, 2]
    inter = overlap[..., 0] * overlap[..., 1]
    union = size1[..., 0] * size1[..., 1] + size2[..., 0] * size2[..., 1] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
