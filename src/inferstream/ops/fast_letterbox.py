"""Approximate letterbox for accelerators: resize the frame's own planes in float, then convert colour.

``preprocess_batch``'s exact path converts each frame to RGB at full resolution in videoconvert's integer
arithmetic, then resizes in cv2's fixed point: bit-exact to a CPU pipeline, but on a GPU that full-resolution
integer work costs more than the model. Here a group of frames sharing format, size and colorimetry takes a
fixed number of kernels, whatever its size:

- each plane kind is gathered in one copy and cast (``gather_planes``), then resized with
  bilinear ``interpolate`` (half-pixel centres, no antialiasing: cv2's ``INTER_LINEAR`` geometry) straight to
  the letterboxed size; chroma goes from half resolution, sited at the centre of each 2×2 block as the exact
  NV12 path places it (so odd sizes keep their geometry too);
- YUV becomes RGB through ``color.yuv_affine`` prescaled by 1/255, clamped to [0, 1], written in place.

Not bit-exact: resizing first moves the clamp and the rounding, and videoconvert's integer terms become fitted
lines; ``tests/ops/test_fast_letterbox.py`` pins how far the model input may drift from the exact path.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from inferstream.frames.raw import PLANAR_FORMATS
from inferstream.ops.color import check_group, colour_bytes, yuv_affine

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.frames.raw import RawFrame


def resize_rgb_into(frames: Sequence[RawFrame], out: Tensor) -> Tensor:
    """Resize a group of frames to ``out``'s size and write them there as RGB in [0, 1].

    Args:
        frames: G >= 1 frames with identical ``(format, width, height, matrix, full_range)``.
        out (Tensor[G, 3, h, w]): floating destination, e.g. a window of the letterbox canvas; it sets the size,
            device and dtype.

    Returns:
        ``out``, written in place.

    Raises:
        ValueError: frames ``color.to_rgb_nchw`` rejects.
    """
    check_group(frames)
    first = frames[0]
    size = tuple(out.shape[-2:])
    if first.format not in PLANAR_FORMATS:
        reversed_ = colour_bytes(first)[1]
        rgb = gather_planes([colour_bytes(f)[0] for f in frames], out.device, out.dtype).permute(0, 3, 1, 2)
        rgb = F.interpolate(rgb, size=size, mode="bilinear", align_corners=False, antialias=False)
        return torch.mul(rgb.flip(1) if reversed_ else rgb, 1 / 255, out=out)
    luma = gather_planes([f.planes[0] for f in frames], out.device, out.dtype).unsqueeze(1)
    luma = F.interpolate(luma, size=size, mode="bilinear", align_corners=False, antialias=False)
    if first.format == "NV12":  # [G, 2, h/2, w/2], channels last
        chroma = gather_planes([f.planes[1] for f in frames], out.device, out.dtype).permute(0, 3, 1, 2)
    else:  # U of every frame, then V of every frame: [2G, 1, h/2, w/2]
        planes = [f.planes[1] for f in frames] + [f.planes[2] for f in frames]
        chroma = gather_planes(planes, out.device, out.dtype).unsqueeze(1)
    # chroma spans the frame's width / 2 x height / 2 (not its ceil): pass the scales, or odd sizes drift
    chroma = torch.ops.aten.upsample_bilinear2d(chroma, size, False, 2 * size[0] / first.height,
                                                2 * size[1] / first.width)  # fmt: skip
    g = len(frames)
    u, v = (chroma[:, 0:1], chroma[:, 1:2]) if first.format == "NV12" else (chroma[:g], chroma[g:])
    ky, ku, kv, bias = _affine(first.matrix, first.full_range, out.device, out.dtype)
    torch.add(bias, luma, alpha=ky, out=out)
    return out.addcmul_(u, ku).addcmul_(v, kv).clamp_(0, 1)


def gather_planes(planes: Sequence[Tensor], device: torch.device, dtype: torch.dtype) -> Tensor:
    """Stack same-shaped plane views into ``Tensor[G, *shape]`` of ``dtype`` on ``device``, in two copies whatever G.

    Views with equal strides (as pitched planes of one pool are) are copied as the contiguous memory span each
    covers, padding between rows included: ``torch.stack`` of contiguous tensors is one batched kernel on CUDA,
    where strided views would take one copy each, and the cast of a contiguous buffer is a vectorised one. The
    result is a strided view of that buffer (``interpolate`` reads it as it is).
    """
    first = planes[0]
    if any(p.stride() != first.stride() for p in planes):
        return torch.stack(list(planes)).to(device).to(dtype)
    span = 1 + sum((n - 1) * s for n, s in zip(first.shape, first.stride()))
    flat = torch.stack([p.as_strided((span,), (1,)) for p in planes]).to(device).to(dtype)
    return flat.as_strided((len(planes), *first.shape), (span, *first.stride()))


@functools.lru_cache(maxsize=32)
def _affine(
    matrix: str, full_range: bool, device: torch.device, dtype: torch.dtype
) -> tuple[float, Tensor, Tensor, Tensor]:
    """``yuv_affine`` over 255 as broadcastable factors: luma gain, U and V gains and bias, each ``[1, 3, 1, 1]``."""
    m, b = yuv_affine(matrix, full_range)
    cols = torch.tensor(m, dtype=torch.float64).T / 255
    bias = torch.tensor(b, dtype=torch.float64) / 255
    ku, kv, bias = (t.view(1, 3, 1, 1).to(device=device, dtype=dtype) for t in (cols[1], cols[2], bias))
    return m[0][0] / 255, ku, kv, bias
