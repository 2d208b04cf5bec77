"""Crop many boxes out of a batch of frames and resize each to one size, in one batched gather on the device.

The crop is the integer pixel box ``[x1, x2) x [y1, y2)`` (edges rounded, clipped to the frame, at least one
pixel), resized bilinearly with half-pixel centres and no antialiasing, clamped to the crop's own pixels: the
values ``F.interpolate(crop, size, mode="bilinear", align_corners=False)`` (torchvision's
``F.resize(antialias=False)``) gives on the cropped image. ``torchvision.ops.roi_align(aligned=True,
sampling_ratio=1)`` samples at the same points but reads pixels outside the box at its edges (and averages several
samples per bin otherwise); clamping to the crop is what nvinfer's object scaling and a crop-then-resize do.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch import Tensor


def pixel_boxes(boxes_xyxy: Tensor, height: Tensor | int, width: Tensor | int) -> Tensor:
    """Integer crop boxes: edges rounded, clipped to the frame, at least 1 px wide and high.

    Args:
        boxes_xyxy (Tensor[K, 4]): float boxes in frame pixels.
        height, width: the frame size, a number or ``Tensor[K]`` per box.

    Returns:
        Tensor[K, 4]: int64 ``x1, y1, x2, y2`` with ``0 <= x1 < x2 <= width`` and ``0 <= y1 < y2 <= height``.
    """
    b = boxes_xyxy.round().long()
    w = torch.as_tensor(width, device=b.device).expand(len(b))
    h = torch.as_tensor(height, device=b.device).expand(len(b))
    x1 = torch.minimum(b[:, 0].clamp(min=0), w - 1)
    y1 = torch.minimum(b[:, 1].clamp(min=0), h - 1)
    x2 = torch.maximum(torch.minimum(b[:, 2], w), x1 + 1)
    y2 = torch.maximum(torch.minimum(b[:, 3], h), y1 + 1)
    return torch.stack([x1, y1, x2, y2], dim=1)


def _taps(start: Tensor, length: Tensor, out: int) -> tuple[Tensor, Tensor, Tensor]:
    """Per box, the two source indices and the weight of the second for each of ``out`` output positions."""
    scale = length.float() / out  # as upsample_bilinear2d computes it: input / output in float
    src = ((torch.arange(out, device=start.device, dtype=torch.float32) + 0.5) * scale[:, None] - 0.5).clamp(min=0)
    i0 = src.floor().long()
    i0 = torch.minimum(i0, (length - 1)[:, None])
    i1 = torch.minimum(i0 + 1, (length - 1)[:, None])
    lam = (src - i0.float()).clamp(0, 1)
    return start[:, None] + i0, start[:, None] + i1, lam


def crop_resize(images: Sequence[Tensor], boxes: Tensor, image_ids: Tensor, size_hw: tuple[int, int],
                dtype: torch.dtype = torch.float32) -> Tensor:
    """Every box's crop of its image, resized to ``size_hw``, as one batch (no per-box or per-pixel loop).

    Args:
        images: B uint8 ``Tensor[H_b, W_b, 3]`` (sizes may differ), all on one device.
        boxes (Tensor[K, 4]): int64 pixel boxes from ``pixel_boxes`` (inside their image).
        image_ids (Tensor[K]): int64, the image of each box.
        size_hw: (height, width) of every crop.
        dtype: floating dtype of the result.

    Returns:
        Tensor[K, 3, h, w]: values in [0, 1] (pixel / 255), on the images' device.

    Raises:
        ValueError: no images, or boxes that are not ``[K, 4]`` with one image id each.
    """
    if not images:
        raise ValueError("images: expected at least one image, got none")
    if boxes.ndim != 2 or boxes.shape[1] != 4 or image_ids.shape != (boxes.shape[0],):
        raise ValueError(f"boxes {tuple(boxes.shape)} / image_ids {tuple(image_ids.shape)}: expected [K, 4] and [K]")
    device = images[0].device
    if len(images) == 1:
        stack = images[0][None]  # a view: no copy of the frame
    elif len({tuple(im.shape) for im in images}) == 1:
        stack = torch.stack(list(images))
    else:  # pad to the largest: the taps never leave a box, so the padding is never read
        hm, wm = max(im.shape[0] for im in images), max(im.shape[1] for im in images)
        stack = images[0].new_zeros((len(images), hm, wm, 3))
        for i, im in enumerate(images):
            stack[i, :im.shape[0], :im.shape[1]] = im
    boxes, ids = boxes.to(device), image_ids.to(device)
    oh, ow = size_hw
    y0, y1, ly = _taps(boxes[:, 1], boxes[:, 3] - boxes[:, 1], oh)
    x0, x1, lx = _taps(boxes[:, 0], boxes[:, 2] - boxes[:, 0], ow)
    b = ids[:, None, None]

    def at(ys: Tensor, xs: Tensor) -> Tensor:
        return stack[b, ys[:, :, None], xs[:, None, :]].to(dtype)  # [K, h, w, 3]

    lx4, ly4 = lx[:, None, :, None].to(dtype), ly[:, :, None, None].to(dtype)
    top = at(y0, x0) * (1 - lx4) + at(y0, x1) * lx4
    bottom = at(y1, x0) * (1 - lx4) + at(y1, x1) * lx4
    out = top * (1 - ly4) + bottom * ly4
    return out.div_(255).permute(0, 3, 1, 2).contiguous()
