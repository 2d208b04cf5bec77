"""Non-maximum suppression for a whole batch in one call: axis-aligned (torchvision) and oriented (ProbIoU).

Both functions take the candidates of every image of a batch as flat ``[N]`` tensors with an ``image_ids``
column, keep images and classes apart, and return the kept indices grouped by image (ascending) and, within an
image, by descending score: the order ultralytics' ``non_max_suppression`` returns per image.

- ``nms_xyxy`` is greedy NMS (``torchvision.ops.nms``). Groups are kept apart by shifting each (image, class)
  group to its own region; the shift is done in float64 so that it costs no precision (ultralytics shifts by
  ``class * 7680`` in float32, which rounds coordinates to ~1/16 px for high class ids). Up to ``ONE_CALL_MAX``
  candidates (per device type) the whole batch is one call; beyond, one call per image (the cost is quadratic in
  the count).
- ``nms_cxcywhr`` is ultralytics' rotated NMS: *Fast-NMS* with ProbIoU (the Gaussian-Hellinger overlap of
  ``ultralytics.utils.metrics.batch_probiou``), where a box is dropped if any higher-scoring box of its group
  overlaps it above the threshold, suppressed or not. The ``[B, K, K]`` overlaps (K = most candidates in one
  image) are computed in row blocks of at most ``PAIRS_PER_BLOCK`` pairs, so memory stays bounded.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torchvision  # type: ignore[import-untyped]

if TYPE_CHECKING:
    from torch import Tensor

# candidates up to which nms_xyxy runs one torchvision call for the whole batch: on the CPU its greedy loop compares
# across images too; on CUDA one call is one IoU mask (N^2 / 64 words) and one host sync where image by image is one
# sync per image, and a model server decodes a whole forward's images (32 x hundreds of candidates) at once
ONE_CALL_MAX = {"cpu": 8192, "cuda": 16384}
PAIRS_PER_BLOCK = 1 << 23  # ProbIoU pairs computed at once by nms_cxcywhr (~32 MB per float32 temporary)


def nms_xyxy(
    boxes: Tensor,
    scores: Tensor,
    labels: Tensor,
    image_ids: Tensor,
    iou_threshold: float,
    agnostic: bool = False,
) -> Tensor:
    """Greedy NMS per (image, class) — or per image when ``agnostic`` — over a whole batch.

    Args:
        boxes (Tensor[N, 4]): ``(x1, y1, x2, y2)``, pixels, float.
        scores (Tensor[N]): float.
        labels (Tensor[N]): int64 class ids.
        image_ids (Tensor[N]): int64 index of each candidate's image in the batch.
        iou_threshold: a box is dropped when its IoU with a kept, higher-scoring box of its group is above this.
        agnostic: ignore classes (suppress across them within an image).

    Returns:
        Tensor[K]: int64 indices of the kept boxes, by image then descending score.

    Raises:
        ValueError: mismatched shapes or dtypes.
    """
    _check(boxes, scores, labels, image_ids, 4)
    if boxes.shape[0] == 0:
        return torch.zeros((0,), dtype=torch.int64, device=boxes.device)
    group = image_ids if agnostic else image_ids * (labels.max() + 1) + labels
    b = boxes.double()
    span = (b.max() - b.min()).clamp(min=0) + 1  # 0-dim tensors: no host sync
    shifted = b - b.min() + (group.double() * span)[:, None]
    if boxes.shape[0] <= ONE_CALL_MAX.get(boxes.device.type, ONE_CALL_MAX["cpu"]):
        keep: Tensor = torchvision.ops.nms(shifted, scores.double(), iou_threshold)
        return keep[torch.sort(image_ids[keep], stable=True).indices]
    # one call costs O(N^2) time (and N^2/64 words of mask on CUDA) over the whole batch: go image by image
    order = torch.sort(image_ids, stable=True).indices
    parts = torch.split(order, torch.bincount(image_ids).tolist())
    return torch.cat([idx[torchvision.ops.nms(shifted[idx], scores[idx].double(), iou_threshold)] for idx in parts])


def nms_cxcywhr(
    boxes: Tensor,
    scores: Tensor,
    labels: Tensor,
    image_ids: Tensor,
    iou_threshold: float,
    agnostic: bool = False,
) -> Tensor:
    """Ultralytics' rotated NMS (Fast-NMS with ProbIoU) per (image, class) over a whole batch.

    Args:
        boxes (Tensor[N, 5]): ``(cx, cy, w, h, r)``, pixels and radians, float.
        scores (Tensor[N]): float.
        labels (Tensor[N]): int64 class ids.
        image_ids (Tensor[N]): int64 index of each candidate's image in the batch.
        iou_threshold: a box is dropped when its ProbIoU with any higher-scoring box of its group is above this.
        agnostic: ignore classes (suppress across them within an image).

    Returns:
        Tensor[K]: int64 indices of the kept boxes, by image then descending score.

    Raises:
        ValueError: mismatched shapes or dtypes.
    """
    _check(boxes, scores, labels, image_ids, 5)
    n = boxes.shape[0]
    if n == 0:
        return torch.zeros((0,), dtype=torch.int64, device=boxes.device)
    order = by_image_then_score(scores, image_ids)
    img = image_ids[order]
    rank = rank_in_image(img)
    counts = torch.bincount(img)
    n_img, k = counts.shape[0], int(counts.max())  # the one host sync: the padded width
    valid = torch.zeros((n_img, k), dtype=torch.bool, device=boxes.device)
    valid[img, rank] = True
    padded = boxes.new_zeros((n_img, k, 5))
    padded[img, rank] = boxes[order]
    lab = labels.new_full((n_img, k), -1)
    lab[img, rank] = labels[order]
    suppressed = torch.zeros((n_img, k), dtype=torch.bool, device=boxes.device)
    col = torch.arange(k, device=boxes.device)
    step = max(1, PAIRS_PER_BLOCK // (n_img * k))  # rows per block: bounds the [B, rows, K] temporaries
    for r0 in range(0, k, step):
        rows = slice(r0, min(r0 + step, k))
        overlap = probiou_cxcywhr(padded[:, rows], padded) > iou_threshold  # [B, rows, K]
        overlap &= valid[:, rows, None] & valid[:, None, :]
        overlap &= col[rows, None] < col[None, :]  # a box is suppressed only by higher-scoring ones
        if not agnostic:
            overlap &= lab[:, rows, None] == lab[:, None, :]
        suppressed |= overlap.any(dim=1)
    kept = valid & ~suppressed
    return order[kept[img, rank]]


def by_image_then_score(scores: Tensor, image_ids: Tensor) -> Tensor:
    """Permutation that sorts candidates by image (ascending), then by score (descending), stably.

    Args:
        scores (Tensor[N]): float.
        image_ids (Tensor[N]): int64.

    Returns:
        Tensor[N]: int64 permutation.
    """
    by_score = torch.sort(scores, descending=True, stable=True).indices
    return by_score[torch.sort(image_ids[by_score], stable=True).indices]


def rank_in_image(image_ids: Tensor) -> Tensor:
    """Position of each element among the elements of its image.

    Args:
        image_ids (Tensor[N]): int64, sorted ascending (e.g. permuted by ``by_image_then_score``).

    Returns:
        Tensor[N]: int64, 0 for the first element of each image, then 1, 2, ...
    """
    n = image_ids.shape[0]
    first = torch.ones(n, dtype=torch.bool, device=image_ids.device)
    first[1:] = image_ids[1:] != image_ids[:-1]
    idx = torch.arange(n, device=image_ids.device)
    return idx - torch.cummax(torch.where(first, idx, 0), dim=0).values


def probiou_cxcywhr(a: Tensor, b: Tensor, eps: float = 1e-7) -> Tensor:
    """Pairwise ProbIoU of oriented boxes, ``1 - Hellinger distance`` of their Gaussians (as ultralytics).

    Args:
        a (Tensor[..., N, 5]): ``(cx, cy, w, h, r)``, pixels and radians, float.
        b (Tensor[..., M, 5]): same format; leading dims broadcast with ``a``'s.
        eps: numerical guard, as ultralytics' ``batch_probiou``.

    Returns:
        Tensor[..., N, M]: similarities in ``[0, 1]`` (up to ``eps``).
    """
    x1, y1 = a[..., :, None, 0], a[..., :, None, 1]
    x2, y2 = b[..., None, :, 0], b[..., None, :, 1]
    a1, b1, c1 = (t[..., :, None] for t in _covariance(a))
    a2, b2, c2 = (t[..., None, :] for t in _covariance(b))
    sa, sb, sc = a1 + a2, b1 + b2, c1 + c2
    det = sa * sb - sc.pow(2)
    t1 = (sa * (y1 - y2).pow(2) + sb * (x1 - x2).pow(2)) / (det + eps) * 0.25
    t2 = (sc * (x2 - x1) * (y1 - y2)) / (det + eps) * 0.5
    t3 = (det / (4 * ((a1 * b1 - c1.pow(2)).clamp(min=0) * (a2 * b2 - c2.pow(2)).clamp(min=0)).sqrt() + eps) + eps)
    bd = (t1 + t2 + t3.log() * 0.5).clamp(eps, 100.0)
    return 1 - (1.0 - (-bd).exp() + eps).sqrt()


def _covariance(boxes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Covariance ``[[a, c], [c, b]]`` of the uniform distribution over each rotated box: ``[..., N]`` each."""
    w2, h2, r = boxes[..., 2].pow(2) / 12, boxes[..., 3].pow(2) / 12, boxes[..., 4]
    cos2, sin2, cs = r.cos().pow(2), r.sin().pow(2), r.cos() * r.sin()
    return w2 * cos2 + h2 * sin2, w2 * sin2 + h2 * cos2, (w2 - h2) * cs


def _check(boxes: Tensor, scores: Tensor, labels: Tensor, image_ids: Tensor, width: int) -> None:
    n = boxes.shape[0] if boxes.ndim == 2 else -1
    if boxes.ndim != 2 or boxes.shape[1] != width or not boxes.is_floating_point():
        raise ValueError(f"boxes: expected a float Tensor[N, {width}], got {boxes.dtype} {tuple(boxes.shape)}")
    for name, t, ok in (("scores", scores, scores.is_floating_point()),
                        ("labels", labels, labels.dtype == torch.int64),
                        ("image_ids", image_ids, image_ids.dtype == torch.int64)):  # fmt: skip
        if tuple(t.shape) != (n,) or not ok:
            kind = "float" if name == "scores" else "int64"
            raise ValueError(f"{name}: expected a {kind} Tensor[{n}], got {t.dtype} {tuple(t.shape)}")
