"""IoU the trackers need, on numpy (trackers run on the host, after the one device-to-host copy); the box
conversions they use are ``ops.boxes``'."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

def iou_matrix_xyxy(boxes1: FloatArray, boxes2: FloatArray) -> FloatArray:
    """Pairwise IoU of two sets of axis-aligned boxes.

    Args:
        boxes1 (ndarray[N, 4]): ``(x1, y1, x2, y2)`` in pixels.
        boxes2 (ndarray[M, 4]): ``(x1, y1, x2, y2)`` in pixels.

    Returns:
        ndarray[N, M] float64: IoU in [0, 1]; 0 where the union is empty (degenerate boxes).
    """
    b1 = np.asarray(boxes1, dtype=np.float64).reshape(-1, 4).T
    b2 = np.asarray(boxes2, dtype=np.float64).reshape(-1, 4).T
    return iou_pairs(b1[:, :, None], b2[:, None, :])


def iou_pairs(first_xyxy: FloatArray, second_xyxy: FloatArray) -> FloatArray:
    """IoU of box pairs: the k-th box of the first set with the k-th of the second (any broadcastable layout).

    The trackers' form: they take the IoU of each track with the detections of its own stream only, a list of
    pairs, in a few numpy calls for all streams (numpy's per-call overhead, not the arithmetic, is the cost).

    Args:
        first_xyxy (ndarray[4, ...]): rows ``x1, y1, x2, y2`` in pixels.
        second_xyxy (ndarray[4, ...]): the same, broadcastable against ``first_xyxy``.

    Returns:
        ndarray[...] float64: IoU in [0, 1]; 0 where the union is empty (degenerate boxes).
    """
    wh1 = np.maximum(first_xyxy[2:] - first_xyxy[:2], 0.0)
    wh2 = np.maximum(second_xyxy[2:] - second_xyxy[:2], 0.0)
    overlap = np.minimum(first_xyxy[2:], second_xyxy[2:])  # [2, ...]: widths, heights
    overlap -= np.maximum(first_xyxy[:2], second_xyxy[:2])
    np.maximum(overlap, 0.0, out=overlap)
    inter = overlap[0] * overlap[1]
    union = wh1[0] * wh1[1] + wh2[0] * wh2[1]
    union -= inter
    iou: FloatArray = np.divide(inter, union, out=np.zeros(inter.shape), where=union > 0)
    return iou


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
    b1 = np.asarray(boxes1_cxcywh, dtype=np.float64).reshape(-1, 4).T
    b2 = np.asarray(boxes2_cxcywh, dtype=np.float64).reshape(-1, 4).T
    slack = np.asarray(slack1_xy, dtype=np.float64).reshape(-1, 2).T
    return slack_iou_pairs(b1[:, :, None], slack[:, :, None], b2[:, None, :])


def slack_iou_pairs(boxes1_cxcywh: FloatArray, slack1_xy: FloatArray, boxes2_cxcywh: FloatArray) -> FloatArray:
    """``slack_iou_matrix`` of box pairs (the k-th box of set 1 with the k-th of set 2), rows layout.

    Args:
        boxes1_cxcywh (ndarray[4, ...]): rows ``cx, cy, w, h``, pixels.
        slack1_xy (ndarray[2, ...]): how far each box of set 1 may move along x and along y, pixels, >= 0.
        boxes2_cxcywh (ndarray[4, ...]): the same as ``boxes1_cxcywh``, broadcastable against it.

    Returns:
        ndarray[...] float64: IoU in [0, 1].
    """
    b1, b2 = boxes1_cxcywh, boxes2_cxcywh
    # ufuncs rather than np.clip: its Python wrapper costs more than the arithmetic at tens of boxes
    offset = np.maximum(np.abs(b1[:2] - b2[:2]) - slack1_xy, 0.0)  # [2, ...]
    size1, size2 = np.maximum(b1[2:], 0.0), np.maximum(b2[2:], 0.0)
    overlap = np.maximum(np.minimum((size1 + size2) / 2 - offset, np.minimum(size1, size2)), 0.0)  # [2, ...]
    inter = overlap[0] * overlap[1]
    union = size1[0] * size1[1] + size2[0] * size2[1] - inter
    iou: FloatArray = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    return iou
