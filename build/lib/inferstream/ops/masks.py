"""Instance masks of a whole batch at frame resolution, computed only inside each box (ultralytics' retina masks).

Ultralytics' ``process_mask_native`` builds an ``H x W`` float mask per object (prototypes x coefficients, the
letterbox padding cropped off, bilinear resize to the frame, ``> 0``, cropped to the box). Here the same samples are
taken only at the pixels of each box, all boxes of the batch in one flat gather on the model's device: the cost is
the boxes' area, not ``N x H x W``, and the result crosses to the host as one uint8 buffer.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.detections import Detections


def retina_masks(protos: Tensor, coeffs: Tensor, counts: list[int], crops: list[tuple[int, int, int, int]],
                 boxes: Tensor, frame_hw: list[tuple[int, int]]) -> Tensor:
    """Binary masks of every detection of a batch, each only over its crop.

    Args:
        protos: ``(B, C, mh, mw)`` prototypes on the model's device.
        coeffs: ``(N, C)`` coefficients of the kept rows, grouped by image in batch order (same device).
        counts: rows per image (sums to N).
        crops: per row ``(x1, y1, x2, y2)`` whole frame pixels, the crop each mask covers (``x2`` exclusive).
        boxes: ``(N, 4)`` float frame-pixel boxes (the mask is zero outside, as ultralytics' ``crop_mask``); host.
        frame_hw: per image ``(height, width)``.

    Returns:
        uint8 ``[sum of crop areas]`` on the device, 0/1, crop after crop in row order, each row-major.
    """
    import torch

    device = protos.device
    parts, start = [], 0
    for image, n in enumerate(counts):
        if n == 0:
            continue
        rows = slice(start, start + n)
        start += n
        areas = [(x2 - x1) * (y2 - y1) for x1, y1, x2, y2 in crops[rows]]
        if not sum(areas):
            continue
        c, mh, mw = protos.shape[1:]
        logits = (coeffs[rows].float() @ protos[image].float().reshape(c, -1)).reshape(n, mh, mw)
        src = _content(logits, frame_hw[image])
        geometry = torch.tensor([list(crop) for crop in crops[rows]], dtype=torch.int64).to(device, non_blocking=True)
        parts.append(_sample(src, geometry, boxes[rows].to(device, non_blocking=True), sum(areas), frame_hw[image]))
    return torch.cat(parts) if parts else protos.new_zeros((0,), dtype=torch.uint8)


def _content(logits: Tensor, frame_hw: tuple[int, int]) -> Tensor:
    """The letterbox's content region of ``(n, mh, mw)`` prototype-resolution logits, as ``process_mask_native``
    crops it (upsampled 2x or 4x first when the padding would not fall on whole prototype pixels)."""
    import torch.nn.functional as F

    _, mh, mw = logits.shape
    h, w = frame_hw
    gain = min(4 * mh / h, 4 * mw / w)
    pad = (4 * mh - max(round(h * gain), 1)) | (4 * mw - max(round(w * gain), 1))
    f = 4 // math.gcd(4, pad | pad // 2)
    if f > 1:
        logits = F.interpolate(logits[None], scale_factor=f, mode="bilinear")[0]
    ih, iw = logits.shape[1:]
    gain = min(ih / h, iw / w)
    pad_w, pad_h = (iw - max(round(w * gain), 1)) / 2, (ih - max(round(h * gain), 1)) / 2
    top, left = round(pad_h - 0.1), round(pad_w - 0.1)
    return logits[:, top : top + max(round(h * gain), 1), left : left + max(round(w * gain), 1)].contiguous()


def _sample(src: Tensor, crops: Tensor, boxes: Tensor, total: int, frame_hw: tuple[int, int]) -> Tensor:
    """``F.interpolate(src, frame_hw, mode="bilinear") > 0`` read at the pixels of each crop only, 0 outside the
    float box: a flat uint8 ``[total]``.

    Separable, as bilinear resizing is: first along x for every prototype row at each crop's columns
    (``[n, ch, max width]``), then along y row by row of every crop; columns outside the box are ``-inf`` before the
    second pass, so they can never exceed 0. Per output pixel only the y blend and the threshold remain.
    """
    import torch

    n, ch, cw = src.shape
    h, w = frame_hw
    device = src.device
    widths, heights = crops[:, 2] - crops[:, 0], crops[:, 3] - crops[:, 1]
    wmax = int(widths.max()) if n else 0
    cols = torch.arange(wmax, device=device)
    x = crops[:, :1] + cols  # [n, wmax] frame columns of each crop
    x0, x1, wx = _taps(x, cw / w, cw)
    box = boxes.float()
    gather = [src.gather(2, t[:, None, :].expand(n, ch, wmax)) for t in (x0, x1)]
    across = gather[0] * (1 - wx)[:, None, :] + gather[1] * wx[:, None, :]  # [n, ch, wmax]
    outside = (x < box[:, :1]) | (x >= box[:, 2:3]) | (cols >= widths[:, None])
    across.masked_fill_(outside[:, None, :], float("-inf"))
    det = torch.repeat_interleave(torch.arange(n, device=device), heights)  # one entry per output row
    starts = torch.cumsum(heights, 0) - heights
    y = crops[det, 1] + torch.arange(len(det), device=device) - starts[det]
    y0, y1, wy = _taps(y, ch / h, ch)
    value = across[det, y0] * (1 - wy)[:, None] + across[det, y1] * wy[:, None]  # [rows, wmax]
    keep = (value > 0) & ((y >= box[det, 1]) & (y < box[det, 3]))[:, None]
    out = keep[cols[None, :] < widths[det][:, None]]
    return out.to(torch.uint8)


def _taps(dst: Tensor, scale: float, size: int) -> tuple[Tensor, Tensor, Tensor]:
    """Bilinear source taps of ``align_corners=False`` resizing (PyTorch's ``area_pixel_compute_source_index``)."""

    src = ((dst.float() + 0.5) * scale - 0.5).clamp(min=0)
    i0 = src.floor().long().clamp(max=size - 1)
    i1 = (i0 + 1).clamp(max=size - 1)
    return i0, i1, src - i0


def attach_masks(dets: Detections, counts: list[int], protos: Tensor, coeffs: Tensor,
                 frame_hw: list[tuple[int, int]]) -> tuple[Detections, list[int]]:
    """``dets`` (host, frame pixels, clipped) with their masks, and the rows per image after dropping the rows whose
    mask is empty (as ultralytics' segment predictor does). One device-to-host copy for the whole batch.

    Each crop covers the box's rounded edges, the box as the ODMtd stores it (``Detections`` documents this).
    """
    import torch

    from inferstream.detections import Detections

    edges = dets.boxes_xyxy.round().long()
    edges[:, 2:] = torch.maximum(edges[:, 2:], edges[:, :2])
    crops = [tuple(e) for e in edges.tolist()]
    flat = retina_masks(protos, coeffs, counts, crops, dets.boxes_xyxy, frame_hw).cpu()
    shapes = [(y2 - y1, x2 - x1) for x1, y1, x2, y2 in crops]
    areas = [h * w for h, w in shapes]
    ends = torch.tensor(areas, dtype=torch.int64).cumsum(0)
    running = torch.cat((torch.zeros(1, dtype=torch.int64), flat.cumsum(0, dtype=torch.int64)))
    filled = running[ends] - running[ends - torch.tensor(areas, dtype=torch.int64)]
    masks = tuple(m.view(shape) for m, shape in zip(torch.split(flat, areas), shapes))
    keep = filled > 0
    image_of = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts, dtype=torch.int64))
    kept = Detections.trusted(dets.boxes_xyxy, dets.scores, dets.labels, angles_rad=dets.angles_rad,
                              track_ids=dets.track_ids, masks=masks, keypoints=dets.keypoints)[keep]
    return kept, torch.bincount(image_of[keep], minlength=len(counts)).tolist()
