"""Letterbox for accelerators: convert colour at full resolution in float, then resize.

``preprocess_batch``'s exact path converts each frame to RGB at full resolution in videoconvert's integer
arithmetic, then resizes in cv2's fixed point: bit-exact to a CPU pipeline, but on a GPU that integer work costs
about as much as the model. Here a group of frames sharing format, size and colorimetry takes a fixed number of
float kernels, whatever its size:

- each plane kind is gathered in one copy and cast (``gather_planes``);
- 4:2:0 chroma is brought to full resolution as the exact path does it: NV12 interpolated, sited at the centre
  of each 2×2 block (its (3a + b) / 4 filters are bilinear upsampling by 2), I420 repeated over its block
  (videoconvert's I420 fast path);
- YUV becomes RGB through ``color.yuv_affine``, clamped to [0, 255] and rounded to whole levels, as the exact
  path's bytes are; out-of-gamut pixels at sharp saturated edges are clamped before the resize, as there;
- the RGB is resized with bilinear ``interpolate`` (half-pixel centres, no antialiasing: cv2's ``INTER_LINEAR``
  geometry) straight to the letterboxed size and scaled by 1/255; packed RGB input is divided by 255 first and
  then resized, the order of torchvision's and RF-DETR's own predict, so that on the CPU their input is equalled bit
  for bit;
- groups larger than ``MAX_CHUNK_PIXELS`` of source are converted a chunk at a time, to bound the memory the
  full-resolution RGB takes.

On CUDA, YUV frames already on the device take ``letterbox_kernel``'s kernel instead: the same definition computed
per output pixel in one pass, no full-resolution intermediate at all.

Not bit-exact: videoconvert's integer terms become fitted lines (a level at most, on a few pixels) and cv2's fixed
point resize becomes a float one; ``tests/ops/test_letterbox_float.py`` pins the distance to the exact path.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from inferstream.ops.color import NEAREST_CHROMA, check_group, colour_bytes, yuv_affine
from inferstream.ops.letterbox_kernel import letterbox_yuv420_into
from inferstream.rawframe import PLANAR_FORMATS

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.rawframe import RawFrame


MAX_CHUNK_PIXELS = 1920 * 1088 * 32
"""Most source pixels converted at full resolution at once (YUV frames; their memory, not their number, counts)."""


def resize_rgb_into(frames: Sequence[RawFrame], out: Tensor, *, resize_first: bool = False) -> Tensor:
    """Resize a group of frames to ``out``'s size and write them there as RGB in [0, 1].

    Args:
        frames: G >= 1 frames with identical ``(format, width, height, matrix, full_range)``.
        out (Tensor[G, 3, h, w]): floating destination, e.g. a window of the letterbox canvas; it sets the size,
            device and dtype.
        resize_first: YUV frames: resize the planes to ``out``'s size, then convert (no full-resolution pass at
            all: the cheapest, but out-of-gamut pixels at sharp saturated edges are clamped after the resize,
            tens of levels off the exact path there).

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
        # into [0, 1] first, then resize: the float families' own predict (RF-DETR's, torchvision's) does it in
        # this order, and a random-weight DETR moves a query on a 1e-7 difference. Bit for bit on the CPU only:
        # CUDA turns a division by a scalar into a multiplication by its reciprocal
        rgb = F.interpolate(rgb.div_(255), size=size, mode="bilinear", align_corners=False, antialias=False)
        return out.copy_(rgb.flip(1) if reversed_ else rgb)
    if resize_first:
        luma, chroma = _gather_yuv(frames, out.device, out.dtype)
        luma = F.interpolate(luma, size=size, mode="bilinear", align_corners=False, antialias=False)
        # chroma spans the frame's width / 2 x height / 2 (not its ceil): pass the scales, or odd sizes drift
        chroma = torch.ops.aten.upsample_bilinear2d(chroma, size, False, 2 * size[0] / first.height,
                                                    2 * size[1] / first.width)  # fmt: skip
        return _yuv_to_rgb(luma, chroma, first, out).clamp_(0, 255).mul_(1 / 255)
    if out.is_cuda and letterbox_yuv420_into(frames, out):  # the same in one kernel, reading the planes in place
        return out
    # full-resolution RGB of the whole group would take ~12 bytes per source pixel at its peak: bound it by
    # converting at most MAX_CHUNK_PIXELS of source frames at a time (32 frames of 1080p, 8 of 4K)
    step = max(1, MAX_CHUNK_PIXELS // (first.width * first.height))
    for start in range(0, len(frames), step):
        rgb = _full_resolution_rgb(frames[start:start + step], out.device, out.dtype)
        rgb = F.interpolate(rgb, size=size, mode="bilinear", align_corners=False, antialias=False)
        torch.mul(rgb, 1 / 255, out=out[start:start + step])
    return out


def _full_resolution_rgb(frames: Sequence[RawFrame], device: torch.device, dtype: torch.dtype) -> Tensor:
    """A group of YUV 4:2:0 frames as RGB ``[G, 3, H, W]`` in whole levels 0..255, ``dtype`` on ``device``."""
    first = frames[0]
    full = (first.height, first.width)
    luma, chroma = _gather_yuv(frames, device, dtype)
    # the plane spans ceil(h / 2) rows: pass the scale (2), or odd sizes drift
    if first.format in NEAREST_CHROMA:
        chroma = torch.ops.aten.upsample_nearest2d(chroma, full, 2.0, 2.0)
    else:
        chroma = torch.ops.aten.upsample_bilinear2d(chroma, full, False, 2.0, 2.0)
    return _yuv_to_rgb(luma, chroma, first).clamp_(0, 255).round_()


def _gather_yuv(frames: Sequence[RawFrame], device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Luma ``[G, 1, H, W]`` and chroma (NV12: ``[G, 2, h/2, w/2]``; I420: every U, then every V,
    ``[2G, 1, h/2, w/2]``) of a group, cast to ``dtype`` on ``device``."""
    luma = gather_planes([f.planes[0] for f in frames], device, dtype).unsqueeze(1)
    if frames[0].format == "NV12":  # channels last in memory
        return luma, gather_planes([f.planes[1] for f in frames], device, dtype).permute(0, 3, 1, 2)
    planes = [f.planes[1] for f in frames] + [f.planes[2] for f in frames]
    return luma, gather_planes(planes, device, dtype).unsqueeze(1)


def _yuv_to_rgb(luma: Tensor, chroma: Tensor, first: RawFrame, out: Tensor | None = None) -> Tensor:
    """``color.yuv_affine`` of same-sized luma and chroma (``_gather_yuv``'s layouts) as RGB [G, 3, h, w] (into
    ``out`` when given), in levels, not clamped."""
    g = luma.shape[0]
    u, v = (chroma[:, 0:1], chroma[:, 1:2]) if first.format == "NV12" else (chroma[:g], chroma[g:])
    ky, ku, kv, bias = _affine(first.matrix, first.full_range, luma.device, luma.dtype)
    rgb = torch.add(bias, luma, alpha=ky) if out is None else torch.add(bias, luma, alpha=ky, out=out)
    return rgb.addcmul_(u, ku).addcmul_(v, kv)


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
    """``yuv_affine`` as broadcastable factors: luma gain, U and V gains and bias, each ``[1, 3, 1, 1]``."""
    m, b = yuv_affine(matrix, full_range)
    cols = torch.tensor(m, dtype=torch.float64).T
    bias = torch.tensor(b, dtype=torch.float64)
    ku, kv, bias = (t.view(1, 3, 1, 1).to(device=device, dtype=dtype) for t in (cols[1], cols[2], bias))
    return m[0][0], ku, kv, bias
