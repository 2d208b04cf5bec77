"""Frame → RGB ``uint8`` tensors: packed RGB-family channel selection and YUV 4:2:0 (NV12, I420) conversion.

YUV conversion reproduces GStreamer ``videoconvert`` (1.22–1.28, 8-bit path) bit for bit, so a pipeline gives the
model the same pixels whether or not a ``videoconvert`` sits in front of the element:

- Coefficients are the BT.601 / BT.709 ones scaled by 256 and rounded to integers; each term is computed as
  videoconvert's ORC code does: ``((257 * x + 256 * (x < 0)) * coeff) >> 16`` with ``x = value - 128`` (the
  byte is "splatted" into a 16-bit word, then the high half of the product is kept). The sum is clamped to
  ``[-128, 127]`` and shifted back by 128. Note that this is not the textbook float formula: for limited range
  it runs ~1–3 levels darker (green most); ``tests/ops/test_color.py`` pins both the golden videoconvert
  output and the distance to the float formula.
- Chroma: I420 takes videoconvert's I420→RGB fast path, which repeats each chroma sample over its 2×2 block.
  NV12 takes the general path, which interpolates chroma sited at the centre of the 2×2 block with integer
  (3·a + b + 2) >> 2 filters, horizontally then vertically, replicating the edges (videoconvert's behaviour
  when the caps carry no ``chroma-site``).

All helpers work on a leading batch dimension, so frames that share format and size convert in one call.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import torch

from inferstream.rawframe import PACKED_FORMATS, PLANAR_FORMATS, RawFrame

if TYPE_CHECKING:
    from torch import Tensor

# packed format -> (channels per pixel, first of the three colour bytes, True when they read B, G, R)
_PACKED: Final[dict[str, tuple[int, int, bool]]] = {
    "RGB": (3, 0, False), "BGR": (3, 0, True),
    "RGBA": (4, 0, False), "BGRA": (4, 0, True), "RGBx": (4, 0, False), "BGRx": (4, 0, True),
    "xRGB": (4, 1, False), "xBGR": (4, 1, True), "ARGB": (4, 1, False), "ABGR": (4, 1, True),
}  # fmt: skip
_KR_KB: Final[dict[str, tuple[float, float]]] = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
NEAREST_CHROMA: Final[frozenset[str]] = frozenset({"I420"})  # videoconvert's fast path; NV12 interpolates


def to_rgb(frame: RawFrame, device: torch.device | str) -> Tensor:
    """One frame as RGB.

    A packed frame whose bytes read R, G, B (RGB, RGBA, RGBx, ARGB, xRGB) is returned as a view when it already
    lives on ``device`` (no copy); B, G, R layouts are reversed into a new tensor on ``device``. YUV frames are
    uploaded as they are (1.5 bytes per pixel) and converted on ``device``.

    Args:
        frame: the frame's plane views (see ``RawFrame``).
        device: where the result lives.

    Returns:
        Tensor[H, W, 3]: uint8 RGB, possibly a strided view (of the frame's memory for packed RGB).

    Raises:
        ValueError: unknown format or matrix, or planes whose dtype/shape do not match format and size.
    """
    _check_frame(frame)
    if frame.format in _PACKED:
        colour, reversed_ = colour_bytes(frame)
        rgb = colour.to(device)
        return rgb.flip(-1) if reversed_ else rgb
    planes = tuple(p.to(device) for p in frame.planes)
    rgb = _yuv420_rgb_planar(planes, frame.format, frame.width, frame.height, frame.matrix, frame.full_range)
    return rgb.movedim(-3, -1)


def to_rgb_nchw(frames: Sequence[RawFrame], device: torch.device | str) -> Tensor:
    """Several frames that share format, size, matrix and range, as one channels-first RGB batch.

    Args:
        frames: G >= 1 frames with identical ``(format, width, height, matrix, full_range)``.
        device: where the result lives.

    Returns:
        Tensor[G, 3, H, W]: uint8 RGB (possibly a strided view of a new tensor).

    Raises:
        ValueError: an empty list, frames that differ in format/size/matrix/range, or any ``to_rgb`` error.
    """
    check_group(frames)
    first = frames[0]
    if first.format in _PACKED:
        stacked = torch.stack([colour_bytes(f)[0] for f in frames])  # one copy
        nchw = stacked.to(device).movedim(-1, -3)
        return nchw.flip(-3) if colour_bytes(first)[1] else nchw
    planes = tuple(torch.stack([f.planes[i] for f in frames]).to(device) for i in range(len(first.planes)))
    return _yuv420_rgb_planar(planes, first.format, first.width, first.height, first.matrix, first.full_range)


def check_group(frames: Sequence[RawFrame]) -> None:
    """Reject what cannot be converted as one batch: no frames, frames that differ, or a frame ``to_rgb`` rejects.

    Raises:
        ValueError: as ``to_rgb_nchw`` documents.
    """
    if not frames:
        raise ValueError("frames: expected at least one frame, got none")
    keys = {_group_key(f) for f in frames}
    if len(keys) != 1:
        raise ValueError(f"frames: expected one (format, width, height, matrix, full_range), got {sorted(keys)}")
    for f in frames:
        _check_frame(f)


def colour_bytes(frame: RawFrame) -> tuple[Tensor, bool]:
    """A packed frame's three colour bytes as a view ``[H, W, 3]``, and True when they read B, G, R."""
    _, first_byte, reversed_ = _PACKED[frame.format]
    return frame.planes[0][..., first_byte : first_byte + 3], reversed_


def _group_key(frame: RawFrame) -> tuple[str, int, int, str, bool]:
    """Frames with equal keys convert together (the matrix only matters for YUV, but keeping it is harmless)."""
    return (frame.format, frame.width, frame.height, frame.matrix, frame.full_range)


def _check_frame(frame: RawFrame) -> None:
    h, w, hc, wc = frame.height, frame.width, (frame.height + 1) // 2, (frame.width + 1) // 2
    expected: tuple[tuple[int, ...], ...]
    if frame.format in _PACKED:
        expected = ((h, w, _PACKED[frame.format][0]),)
    elif frame.format == "NV12":
        expected = ((h, w), (hc, wc, 2))
    elif frame.format == "I420":
        expected = ((h, w), (hc, wc), (hc, wc))
    else:
        raise ValueError(f"format: expected one of {PACKED_FORMATS + PLANAR_FORMATS}, got {frame.format!r}")
    got = tuple(tuple(p.shape) for p in frame.planes)
    if got != expected or any(p.dtype != torch.uint8 for p in frame.planes):
        dtypes = sorted({str(p.dtype) for p in frame.planes})
        raise ValueError(
            f"{frame.format} {w}x{h} planes: expected uint8 shapes {list(expected)}, got {dtypes} {list(got)}"
        )
    if frame.format in PLANAR_FORMATS and frame.matrix not in _KR_KB:
        raise ValueError(f"matrix: expected one of {sorted(_KR_KB)}, got {frame.matrix!r}")


def yuv_coefficients(matrix: str, full_range: bool) -> tuple[int, int, int, int, int]:
    """videoconvert's 8-bit YUV→RGB multipliers (coefficient × 256, rounded).

    Args:
        matrix: "bt601" or "bt709".
        full_range: True for 0..255 YUV, False for 16..235 (Y) / 16..240 (Cb, Cr).

    Returns:
        ``(Y, Cr→R, Cb→B, Cb→G, Cr→G)``, e.g. ``(298, 409, 516, -100, -208)`` for limited-range BT.601.

    Raises:
        ValueError: unknown matrix.
    """
    if matrix not in _KR_KB:
        raise ValueError(f"matrix: expected one of {sorted(_KR_KB)}, got {matrix!r}")
    kr, kb = _KR_KB[matrix]
    kg = 1.0 - kr - kb
    ys, cs = (1.0, 1.0) if full_range else (255 / 219, 255 / 224)
    coeffs = (ys, 2 * (1 - kr) * cs, 2 * (1 - kb) * cs, -2 * kb * (1 - kb) / kg * cs, -2 * kr * (1 - kr) / kg * cs)
    y, rv, bu, gu, gv = (round(256 * c) for c in coeffs)
    return y, rv, bu, gu, gv


@functools.lru_cache(maxsize=8)
def yuv_affine(matrix: str, full_range: bool) -> tuple[tuple[tuple[float, float, float], ...], tuple[float, ...]]:
    """videoconvert's conversion as one affine map of float levels, for pipelines that resize YUV before converting.

    Each integer term of ``_yuv420_rgb_planar`` is replaced by its least-squares line over the 256 byte values:
    slope ≈ coeff · 257 / 65536 (the byte splat), intercept absorbing the splat's jump at 128 and the half level
    the shift's flooring loses on average. So the float map follows videoconvert (not the textbook formula): under
    a level apart on average, a few levels at most.

    Args:
        matrix: "bt601" or "bt709".
        full_range: True for 0..255 YUV, False for 16..235 (Y) / 16..240 (Cb, Cr).

    Returns:
        ``(m, b)``: RGB ≈ ``m @ (Y, U, V) + b`` in levels 0..255 before clamping; rows R, G, B.

    Raises:
        ValueError: unknown matrix.
    """
    cy, rv, bu, gu, gv = yuv_coefficients(matrix, full_range)
    (sy, oy), (srv, orv), (sbu, obu), (sgu, ogu), (sgv, ogv) = (_fit_term(c) for c in (cy, rv, bu, gu, gv))
    m = ((sy, 0.0, srv), (sy, sgu, sgv), (sy, sbu, 0.0))
    return m, (oy + orv + 128, oy + ogu + ogv + 128, oy + obu + 128)


def _fit_term(coeff: int) -> tuple[float, float]:
    """``(slope, intercept)`` of the least-squares line through ``_term(x, coeff)`` for bytes x = 0..255."""
    x = torch.arange(256, dtype=torch.float64)
    t = _term(x, coeff).double()
    slope = float(((x - x.mean()) * t).sum() / ((x - x.mean()) ** 2).sum())
    return slope, float(t.mean() - slope * x.mean())


def _term(value: Tensor, coeff: int) -> Tensor:
    """ORC ``mulhsw(splatbw(value - 128), coeff)`` on int32: the high 16 bits of the splatted product."""
    x = value.to(torch.int32) - 128
    return ((x * 257 + (x < 0).to(torch.int32) * 256) * coeff) >> 16


def _upsample2_int(c: Tensor, dim: int) -> Tensor:
    """Double ``dim`` with centre-sited (3·near + far + 2) >> 2 filters and replicated edges (int32 in/out)."""
    d = dim % c.ndim
    n = c.shape[d]
    prev = torch.cat((c.narrow(d, 0, 1), c.narrow(d, 0, n - 1)), dim=d)
    nxt = torch.cat((c.narrow(d, 1, n - 1), c.narrow(d, n - 1, 1)), dim=d)
    three = 3 * c + 2
    return torch.stack(((three + prev) >> 2, (three + nxt) >> 2), dim=d + 1).flatten(d, d + 1)


def _repeat2(c: Tensor) -> Tensor:
    """Repeat each sample of ``[..., h, w]`` over a 2×2 block → ``[..., 2h, 2w]``."""
    return c.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)


def _yuv420_rgb_planar(
    planes: tuple[Tensor, ...], fmt: str, width: int, height: int, matrix: str, full_range: bool
) -> Tensor:
    """``Y [..., H, W]`` + chroma planes (see ``RawFrame``) → ``[..., 3, H, W]`` uint8, as videoconvert does."""
    y = planes[0]
    u, v = (planes[1][..., 0], planes[1][..., 1]) if fmt == "NV12" else (planes[1], planes[2])
    cy, rv, bu, gu, gv = yuv_coefficients(matrix, full_range)
    if fmt in NEAREST_CHROMA:  # chroma terms at chroma resolution, then spread over each 2x2 block
        r_c, b_c, g_c = _term(v, rv), _term(u, bu), _term(u, gu) + _term(v, gv)
        chroma = _repeat2(torch.stack((r_c, g_c, b_c), dim=-3))[..., :height, :width]
    else:
        u2, v2 = (_upsample2_int(_upsample2_int(c.to(torch.int32), -1), -2)[..., :height, :width] for c in (u, v))
        chroma = torch.stack((_term(v2, rv), _term(u2, gu) + _term(v2, gv), _term(u2, bu)), dim=-3)
    rgb = (_term(y, cy).unsqueeze(-3) + chroma).clamp_(-128, 127) + 128
    return rgb.to(torch.uint8)
