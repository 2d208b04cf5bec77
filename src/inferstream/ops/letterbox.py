"""Batch preprocessing (colour convert + resize + letterbox) and its inverse on boxes.

The geometry is ultralytics' ``LetterBox(auto=False, center=True, scaleup=True)`` exactly: scale
``r = min(H / h, W / w)``, resized size ``max(round(w * r), 1) x max(round(h * r), 1)`` (Python's round), padding
split ``round(d / 2 - 0.1)`` before and ``round(d / 2 + 0.1)`` after, pad value 114. The resize is bilinear with
half-pixel centres and no antialiasing, in cv2's own uint8 fixed-point arithmetic (``INTER_LINEAR``), so the model
sees the levels ultralytics' ``LetterBox`` produces; then they are divided by 255. That exact path is the default
on CPU; on CUDA the default is ``letterbox_float``'s float version (≤ 5 levels off, many times faster there).

The inverse follows ultralytics' ``scale_boxes``: per-axis gains ``new_w / w`` and ``new_h / h`` (the rounded
resized size over the frame size), so boxes map back exactly onto the pixels that were resized.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from inferstream.ops.color import to_rgb_nchw
from inferstream.ops.letterbox_float import resize_rgb_into

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.rawframe import RawFrame

PAD_VALUE = 114


@dataclass(frozen=True, slots=True)
class Letterbox:
    """Per-frame transform from frame pixels to model-input pixels: ``x_in = x_frame * scale_x + pad_x``.

    Attributes:
        scale_x, scale_y (Tensor[B]): float32 on the CPU, resized size over frame size, per axis.
        pad_x, pad_y (Tensor[B]): float32, left and top padding in model-input pixels (whole numbers).
    """

    scale_x: Tensor
    scale_y: Tensor
    pad_x: Tensor
    pad_y: Tensor


def letterbox_geometry(frame_hw: tuple[int, int], size_hw: tuple[int, int],
                       stretch: bool = False) -> tuple[int, int, int, int]:
    """Where a frame lands inside the model input, as ultralytics' LetterBox computes it.

    Args:
        frame_hw: (height, width) of the frame, pixels.
        size_hw: (height, width) of the model input, pixels.
        stretch: fill the whole input, aspect ratio not kept (DETR families' plain resize).

    Returns:
        ``(new_h, new_w, top, left)``: the resized frame's size and its offset inside the input, pixels.

    Raises:
        ValueError: a size that is not two positive ints.
    """
    _check_size(frame_hw, "frame_hw")
    _check_size(size_hw, "size_hw")
    (h, w), (th, tw) = frame_hw, size_hw
    if stretch:
        return th, tw, 0, 0
    r = min(th / h, tw / w)
    new_w, new_h = max(round(w * r), 1), max(round(h * r), 1)
    return new_h, new_w, round((th - new_h) / 2 - 0.1), round((tw - new_w) / 2 - 0.1)


def rect_input_size(frames_hw: Sequence[tuple[int, int]], size_hw: tuple[int, int], stride: int) -> tuple[int, int]:
    """The smallest input that holds every frame as ``size_hw`` would, with no padding beyond a stride multiple.

    This is ultralytics' ``LetterBox(auto=True, stride=stride)`` (its predict on PyTorch and dynamic models): the
    scale is the one ``size_hw`` gives, the padding is cut to ``d % stride``; 768x576 video at 640 runs at 640x480.
    Frames of several sizes share one input per batch: the largest height and width of their own rectangles (each at
    most ``size_hw``), so every frame keeps the scale ``size_hw`` gives it (ultralytics falls back to ``size_hw``
    for a batch of mixed sizes, which changes only the padding).

    Args:
        frames_hw: (height, width) of each frame, pixels, at least one.
        size_hw: (height, width) of the square (or fixed) input the model would otherwise run at.
        stride: the network's largest stride; both sides of the result are ``size`` minus a multiple of it.

    Returns:
        (height, width) of the input, pixels.

    Raises:
        ValueError: no frames, a bad size, or a stride that is not a positive int.
    """
    if not frames_hw:
        raise ValueError("frames_hw: expected at least one frame size, got none")
    if not isinstance(stride, int) or stride <= 0:
        raise ValueError(f"stride: expected a positive int, got {stride!r}")
    height = width = 0
    for frame_hw in frames_hw:
        new_h, new_w, _, _ = letterbox_geometry(frame_hw, size_hw)
        height = max(height, new_h + (size_hw[0] - new_h) % stride)
        width = max(width, new_w + (size_hw[1] - new_w) % stride)
    return height, width


def rect_geometry(frame_hw: tuple[int, int], fit_hw: tuple[int, int],
                  size_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """Where a frame lands in a rectangular input: scaled as into ``fit_hw``, centred in ``size_hw``.

    ``letterbox_geometry(frame_hw, size_hw)`` would take the scale from the rectangle itself, which differs from
    ultralytics' by one pixel for some sizes (its resized size comes from the square, then the padding is cut).

    Args:
        frame_hw: (height, width) of the frame, pixels.
        fit_hw: (height, width) the scale is taken from (the model's square size).
        size_hw: (height, width) of the input, at least the resized frame (``rect_input_size``'s answer).

    Returns:
        ``(new_h, new_w, top, left)``, as ``letterbox_geometry``.

    Raises:
        ValueError: a bad size, or a ``size_hw`` smaller than the resized frame.
    """
    new_h, new_w, _, _ = letterbox_geometry(frame_hw, fit_hw)
    _check_size(size_hw, "size_hw")
    (th, tw) = size_hw
    if th < new_h or tw < new_w:
        raise ValueError(f"size_hw {size_hw}: smaller than the resized frame ({new_h}, {new_w})")
    return new_h, new_w, round((th - new_h) / 2 - 0.1), round((tw - new_w) / 2 - 0.1)


def preprocess_batch(
    frames: Sequence[RawFrame],
    size_hw: tuple[int, int],
    device: torch.device | str,
    dtype: torch.dtype,
    *,
    exact: bool | None = None,
    resize_first: bool = False,
    stretch: bool = False,
    pad_value: int = PAD_VALUE,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    bgr: bool = False,
    fit_hw: tuple[int, int] | None = None,
) -> tuple[Tensor, Letterbox]:
    """Colour-convert, resize and letterbox a batch of frames into one model input.

    Frames that share format, size and colorimetry are converted and resized together (one call per group);
    frames may otherwise differ in size and format.

    Args:
        frames: B >= 1 frames (plane views; see ``RawFrame``).
        size_hw: (height, width) of the model input, pixels.
        device: where the batch is built (pixels are uploaded in their source format, then converted there).
        dtype: floating dtype of the result.
        exact: True: convert at full resolution, then resize, bit-exact to videoconvert + cv2 (see above).
            False: convert in float at full resolution, then resize (``letterbox_float``: a fixed number of
            kernels per group, not bit-exact). None: exact unless ``device`` is CUDA, where the exact path costs
            more than most models.
        resize_first: with the fast path, resize YUV planes before converting them (``letterbox_float``'s
            cheapest mode, tens of levels off at saturated edges).
        stretch: resize every frame to the whole input (no letterbox, no padding).
        pad_value: the padding's level (0..255).
        mean, std: per-channel normalisation of the [0, 1] values, ``(x - mean) / std``, applied to the whole
            batch at once after the resize (padding included); None: none.
        bgr: channels in B, G, R order.
        fit_hw: scale each frame as into this size and centre it in ``size_hw`` (a ``rect_input_size``
            rectangle; see ``rect_geometry``); None: into ``size_hw`` itself. Ignored with ``stretch``.

    Returns:
        ``(batch, letterbox)``: ``Tensor[B, 3, H, W]`` (RGB in [0, 1] and padding ``pad_value / 255`` unless
        normalised or swapped) and the per-frame transform.

    Raises:
        ValueError: no frames, a bad ``size_hw``, a non-floating ``dtype``, or a frame ``to_rgb`` rejects.
    """
    if not frames:
        raise ValueError("frames: expected at least one frame, got none")
    _check_size(size_hw, "size_hw")
    if not dtype.is_floating_point:
        raise ValueError(f"dtype: expected a floating dtype, got {dtype}")
    th, tw = size_hw
    out = torch.full((len(frames), 3, th, tw), pad_value / 255, dtype=dtype, device=device)
    groups: dict[tuple[str, int, int, str, bool], list[int]] = {}
    for i, f in enumerate(frames):
        groups.setdefault((f.format, f.width, f.height, f.matrix, f.full_range), []).append(i)
    geometry = [0.0] * (4 * len(frames))  # scale_x, scale_y, pad_x, pad_y interleaved by frame
    if exact is None:
        exact = torch.device(device).type != "cuda"
    for (_, w, h, _, _), idx in groups.items():
        new_h, new_w, top, left = (rect_geometry((h, w), fit_hw, size_hw) if fit_hw and not stretch
                                   else letterbox_geometry((h, w), size_hw, stretch))
        group = [frames[i] for i in idx]
        adjacent = idx[-1] - idx[0] == len(idx) - 1
        rows = slice(idx[0], idx[-1] + 1) if adjacent else torch.tensor(idx, device=device)
        window = (rows, slice(None), slice(top, top + new_h), slice(left, left + new_w))
        if exact:
            out[window] = _resize(to_rgb_nchw(group, device), new_h, new_w).to(dtype).div_(255)  # as ultralytics
        elif adjacent:
            resize_rgb_into(group, out[window], resize_first=resize_first)  # straight into the canvas
        else:
            out[window] = resize_rgb_into(group, out.new_empty((len(idx), 3, new_h, new_w)),
                                          resize_first=resize_first)
        for i in idx:
            geometry[4 * i : 4 * i + 4] = (new_w / w, new_h / h, float(left), float(top))
    if bgr:
        out = out.flip(1)
    if mean is not None or std is not None:
        out = normalise_(out, mean or (0.0, 0.0, 0.0), std or (1.0, 1.0, 1.0))
    # on the host: boxes are mapped back there after their one copy (a device copy here would cost a GIL hand-off)
    lb = torch.tensor(geometry, dtype=torch.float32).view(len(frames), 4).T.contiguous()
    return out, Letterbox(scale_x=lb[0], scale_y=lb[1], pad_x=lb[2], pad_y=lb[3])


def normalise_(batch: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """``(batch - mean) / std`` per channel, in place.

    Args:
        batch (Tensor[B, 3, H, W]): floating values in [0, 1].
        mean, std: three values each (channel order of ``batch``).

    Returns:
        ``batch``, normalised.

    Raises:
        ValueError: not three values each, or a std that is not positive.
    """
    if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
        raise ValueError(f"mean {tuple(mean)} / std {tuple(std)}: expected three values each, std > 0")
    m, s = _channel_constants(tuple(mean), tuple(std), batch.dtype, batch.device)
    return batch.sub_(m).div_(s)


@functools.lru_cache(maxsize=16)
def _channel_constants(mean: tuple[float, ...], std: tuple[float, ...], dtype: torch.dtype,
                       device: torch.device) -> tuple[Tensor, Tensor]:
    """``mean`` and ``std`` as ``[1, 3, 1, 1]`` tensors on ``device``, made once (no upload per batch)."""
    return (torch.tensor(mean, dtype=dtype, device=device).view(1, 3, 1, 1),
            torch.tensor(std, dtype=dtype, device=device).view(1, 3, 1, 1))


def unletterbox_xyxy(boxes: Tensor, lb: Letterbox, image_ids: Tensor) -> Tensor:
    """Map a batch's boxes from letterboxed model-input pixels back to their frames' pixels.

    Args:
        boxes (Tensor[N, 4]): ``(x1, y1, x2, y2)`` in model-input pixels, float.
        lb: the batch's letterbox parameters, one per image.
        image_ids (Tensor[N]): int64, each box's image in the batch.

    Returns:
        Tensor[N, 4]: ``(x1, y1, x2, y2)`` in frame pixels, not clipped.

    Raises:
        ValueError: boxes that are not a float ``Tensor[N, 4]``, or ``image_ids`` not an int64 ``Tensor[N]``.
    """
    _check_boxes(boxes)
    if image_ids.dtype != torch.int64 or tuple(image_ids.shape) != (boxes.shape[0],):
        raise ValueError(f"image_ids: expected an int64 Tensor[{boxes.shape[0]}], got {image_ids.dtype} "
                         f"{tuple(image_ids.shape)}")
    # each image's pads and gains as (x1, y1, x2, y2) columns, picked per box in one gather
    maps = torch.stack((lb.pad_x, lb.pad_y, lb.pad_x, lb.pad_y, lb.scale_x, lb.scale_y, lb.scale_x, lb.scale_y),
                       dim=1)[image_ids]
    return (boxes - maps[:, :4]) / maps[:, 4:]


def unletterbox_keypoints(kpts: Tensor, lb: Letterbox, image_ids: Tensor, frames: Sequence[RawFrame]) -> Tensor:
    """``(N, K, 3)`` keypoints from model-input to frame pixels, clipped to the frame (ultralytics' ``scale_coords``).

    Args:
        kpts: x, y, score per keypoint (host).
        lb: the batch's letterbox parameters; ``image_ids`` the image of each row; ``frames`` the batch.
    """
    sizes = torch.tensor([[f.width, f.height] for f in frames], dtype=torch.float32)[image_ids][:, None, :]
    scale = torch.stack((lb.scale_x[image_ids], lb.scale_y[image_ids]), dim=1)[:, None, :].float()
    pad = torch.stack((lb.pad_x[image_ids], lb.pad_y[image_ids]), dim=1)[:, None, :].float()
    xy = ((kpts[..., :2] - pad) / scale).clamp(min=0)
    return torch.cat((torch.minimum(xy, sizes), kpts[..., 2:]), dim=2)


def clip_xyxy(boxes: Tensor, frame_wh: Tensor) -> Tensor:
    """Clamp boxes to their frames: x to ``[0, width]``, y to ``[0, height]`` (as ultralytics' ``clip_boxes``).

    Args:
        boxes (Tensor[N, 4]): ``(x1, y1, x2, y2)``, pixels, float.
        frame_wh: ``(width, height)`` of each box's frame, ``Tensor[N, 2]``, or of all of them, ``Tensor[2]``.

    Returns:
        Tensor[N, 4]: a clipped copy.

    Raises:
        ValueError: boxes that are not a float ``Tensor[N, 4]``, or ``frame_wh`` shaped otherwise.
    """
    _check_boxes(boxes)
    if tuple(frame_wh.shape) not in ((boxes.shape[0], 2), (2,)):
        raise ValueError(f"frame_wh: expected a Tensor[{boxes.shape[0]}, 2] or Tensor[2], got "
                         f"{tuple(frame_wh.shape)}")
    frame_wh = frame_wh.to(boxes.dtype)
    return torch.minimum(boxes.clamp(min=0), torch.cat((frame_wh, frame_wh), dim=-1))


def _resize(rgb: Tensor, new_h: int, new_w: int) -> Tensor:
    """``[G, 3, h, w]`` uint8 → ``[G, 3, new_h, new_w]`` float32 levels 0..255, as cv2's uint8 ``INTER_LINEAR``.

    cv2 works in fixed point: 11-bit weights, a horizontal pass into int32, then a vertical pass that keeps the
    high half of 16-bit products (its SIMD kernel): ``(((h0 >> 4) * b0 >> 16) + ((h1 >> 4) * b1 >> 16) + 2) >> 2``.
    Reproducing that makes downscaled frames bit-identical to ``cv2.resize`` (upscaling: >99 % of pixels, the
    rest one level off, where cv2 finishes a row with its scalar kernel). On the CPU, where OpenCV is installed
    (the ultralytics extra brings it), ``cv2.resize`` itself runs, one plane at a time: identical to cv2 on the packed
    frame, upscaling included, and much faster than the emulation (BENCHMARKS.md, *Figures from the code*).
    """
    if rgb.shape[-2:] == (new_h, new_w):
        return rgb.float()
    if rgb.device.type == "cpu" and (cv2 := _opencv()) is not None:
        out = torch.empty((*rgb.shape[:-2], new_h, new_w), dtype=torch.uint8)
        for src, dst in zip(rgb.contiguous().view(-1, *rgb.shape[-2:]), out.view(-1, new_h, new_w)):
            cv2.resize(src.numpy(), (new_w, new_h), dst=dst.numpy(), interpolation=cv2.INTER_LINEAR)
        return out.float()
    x0, x1, a0, a1 = _linear_taps(rgb.shape[-1], new_w, rgb.device)
    y0, y1, b0, b1 = _linear_taps(rgb.shape[-2], new_h, rgb.device)
    rows = rgb.index_select(-1, x0).int().mul_(a0).add_(rgb.index_select(-1, x1).int().mul_(a1))  # [G, 3, h, W]
    rows.bitwise_right_shift_(4)
    top = rows.index_select(-2, y0).mul_(b0[:, None]).bitwise_right_shift_(16)
    bottom = rows.index_select(-2, y1).mul_(b1[:, None]).bitwise_right_shift_(16)
    return top.add_(bottom).add_(2).bitwise_right_shift_(2).clamp_(0, 255).float()


@functools.cache
def _opencv() -> Any:
    """The cv2 module, or None when OpenCV is not installed (then the torch emulation runs)."""
    try:
        import cv2
    except ImportError:
        return None
    return cv2


@functools.lru_cache(maxsize=64)
def _linear_taps(src: int, dst: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """cv2's ``INTER_LINEAR`` taps along one axis (half-pixel centres, replicated edges, float32 positions).

    Returns:
        ``i0, i1`` int64 source indices and ``w0, w1`` int32 weights (scaled by 2048), each ``[dst]``, on ``device``.
    """
    pos = ((torch.arange(dst, dtype=torch.float64) + 0.5) * (1.0 / (dst / src)) - 0.5).float()
    i0 = torch.floor(pos)
    frac = pos - i0
    edge = (i0 < 0) | (i0 >= src - 1)
    frac = torch.where(edge, torch.zeros_like(frac), frac)
    first = i0.long().clamp(0, src - 1)
    second = (first + 1).clamp(max=src - 1)
    w0, w1 = torch.round((1 - frac) * 2048).int(), torch.round(frac * 2048).int()
    return first.to(device), second.to(device), w0.to(device), w1.to(device)


def _check_size(size: tuple[int, int], name: str) -> None:
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"{name}: expected (height, width) as two positive ints, got {size!r}")


def _check_boxes(boxes: Tensor) -> None:
    if boxes.ndim != 2 or boxes.shape[1] != 4 or not boxes.is_floating_point():
        raise ValueError(f"boxes: expected a float Tensor[N, 4], got {boxes.dtype} {tuple(boxes.shape)}")
