"""Draw boxes, rotated boxes and labels into a frame's planes in place (RGB-family, NV12, I420).

Every primitive is a rectangle of the frame, optionally with a small bool mask (glyphs, rotated edges), written
through slices in whatever layout the frame has (for YUV: luma at full, chroma at half resolution). No Python loop
over pixels, and no frame-sized temporaries.
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Final

import numpy as np
import torch

from inferstream.ops.boxes import cxcywhr_to_corners
from inferstream.ops.font5x7 import GLYPH_H, GLYPH_W, GLYPHS

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.rawframe import RawFrame

# channel positions of R, G, B in each packed format
_RGB_INDEX: Final = {"RGB": (0, 1, 2), "BGR": (2, 1, 0), "RGBA": (0, 1, 2), "BGRA": (2, 1, 0), "RGBx": (0, 1, 2),
                     "BGRx": (2, 1, 0), "xRGB": (1, 2, 3), "xBGR": (3, 2, 1), "ARGB": (1, 2, 3), "ABGR": (3, 2, 1)}

Color = tuple[int, int, int]


def id_color(key: int) -> Color:
    """A stable, well-spread colour for an id (track id or class id): golden-ratio hue steps."""
    hue = (key * 0.618033988749895) % 1.0
    i, f = int(hue * 6), hue * 6 - int(hue * 6)
    v, s = 1.0, 0.85
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    r, g, b = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i % 6]
    return int(r * 255), int(g * 255), int(b * 255)


def _yuv(rgb: Color) -> Color:
    r, g, b = rgb
    return (round(16 + 0.257 * r + 0.504 * g + 0.098 * b), round(128 - 0.148 * r - 0.291 * g + 0.439 * b),
            round(128 + 0.439 * r - 0.368 * g - 0.071 * b))


def fill_rect(frame: RawFrame, x1: int, y1: int, x2: int, y2: int, rgb: Color,
              mask: Tensor | None = None) -> None:
    """Fill [x1, x2) x [y1, y2) (clipped to the frame) with ``rgb``, through slices: no coordinate lists.

    Args:
        mask: optional bool [y2 - y1, x2 - x1]; only its True pixels are painted (text glyphs).
    """
    cx1, cy1, cx2, cy2 = max(x1, 0), max(y1, 0), min(x2, frame.width), min(y2, frame.height)
    if cx1 >= cx2 or cy1 >= cy2:
        return
    if mask is not None:
        mask = mask[cy1 - y1:cy2 - y1, cx1 - x1:cx2 - x1]
    if frame.format in _RGB_INDEX:
        region = frame.planes[0][cy1:cy2, cx1:cx2]
        for channel, value in zip(_RGB_INDEX[frame.format], rgb):
            if mask is None:
                region[..., channel] = value
            else:
                region[..., channel][mask] = value
        return
    y, u, v = _yuv(rgb)
    luma = frame.planes[0][cy1:cy2, cx1:cx2]
    if mask is None:
        luma[...] = y
    else:
        luma[mask] = y
    half = (slice(cy1 // 2, (cy2 + 1) // 2), slice(cx1 // 2, (cx2 + 1) // 2))
    cmask = None if mask is None else mask[::2, ::2]
    chroma = ((frame.planes[1][half][..., 0], u), (frame.planes[1][half][..., 1], v)) if frame.format == "NV12" \
        else ((frame.planes[1][half], u), (frame.planes[2][half], v))
    for plane, value in chroma:
        if cmask is None:
            plane[...] = value
        else:
            plane[: cmask.shape[0], : cmask.shape[1]][cmask] = value


def rect_outline(frame: RawFrame, x1: int, y1: int, x2: int, y2: int, thickness: int, rgb: Color) -> None:
    """An axis-aligned box outline, ``thickness`` pixels wide, inside [x1, x2) x [y1, y2)."""
    t = max(1, min(thickness, (x2 - x1 + 1) // 2, (y2 - y1 + 1) // 2))
    for bx1, by1, bx2, by2 in ((x1, y1, x2, y1 + t), (x1, y2 - t, x2, y2), (x1, y1, x1 + t, y2), (x2 - t, y1, x2, y2)):
        fill_rect(frame, bx1, by1, bx2, by2, rgb)


def polygon_outline(corners: np.ndarray, thickness: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel rows and columns (int64) of a closed polygon's edges; corners float [K, 2] (x, y).

    numpy, not torch: a few thousand points per box are too few for intra-op threads to pay.
    """
    start, end = corners, np.roll(corners, -1, axis=0)
    n = math.ceil(float(np.linalg.norm(end - start, axis=1).max())) + 1
    t = np.linspace(0.0, 1.0, n)
    pts = start[:, None, :] + (end - start)[:, None, :] * t[None, :, None]  # [K, n, 2]
    r = np.arange(thickness) - (thickness - 1) // 2
    offs = np.stack(np.meshgrid(r, r, indexing="ij"), axis=-1).reshape(-1, 2)  # [T*T, 2]
    px = np.rint(pts.reshape(-1, 1, 2) + offs[None]).astype(np.int64).reshape(-1, 2)
    return px[:, 1], px[:, 0]


def paint_pixels(frame: RawFrame, ys: np.ndarray, xs: np.ndarray, rgb: Color) -> tuple[int, int]:
    """Paint pixels given by row/column lists, rasterised into a small local mask and painted through slices;
    returns the top-left corner of their bounding box."""
    x1, y1 = int(xs.min()), int(ys.min())
    mask = np.zeros((int(ys.max()) - y1 + 1, int(xs.max()) - x1 + 1), dtype=bool)
    mask[ys - y1, xs - x1] = True
    fill_rect(frame, x1, y1, x1 + mask.shape[1], y1 + mask.shape[0], rgb, torch.from_numpy(mask))
    return x1, y1


@functools.lru_cache(maxsize=4096)
def text_mask(text: str, scale: int) -> Tensor:
    """bool [7*scale, 6*len*scale] bitmap of ``text`` (5x7 glyphs, one blank column between characters)."""
    bits = torch.tensor([GLYPHS.get(ch, GLYPHS["?"]) for ch in text.upper()], dtype=torch.int64)  # [L, 7]
    cols = 2 ** torch.arange(GLYPH_W - 1, -1, -1)
    glyphs = (bits[:, :, None] & cols[None, None, :]) > 0  # [L, 7, 5]
    glyphs = torch.cat([glyphs, torch.zeros(len(text), GLYPH_H, 1, dtype=torch.bool)], dim=2)  # spacing
    mask = glyphs.permute(1, 0, 2).reshape(GLYPH_H, -1)
    return mask.repeat_interleave(scale, dim=0).repeat_interleave(scale, dim=1)


def draw_label(frame: RawFrame, text: str, x: int, y: int, scale: int, fg: Color, bg: Color) -> None:
    """A text label on a filled background whose bottom-left corner is at (x, y); moved inside the frame."""
    mask = text_mask(text, scale)
    h, w = mask.shape[0] + 2 * scale, mask.shape[1] + scale
    x = max(0, min(x, frame.width - w))
    y = max(h, min(y, frame.height))
    fill_rect(frame, x, y - h, x + w, y, bg)
    fill_rect(frame, x + scale, y - h + scale, x + scale + mask.shape[1], y - h + scale + mask.shape[0], fg, mask)


def draw_detections(frame: RawFrame, boxes_xyxy: Tensor, angles_rad: Tensor | None, colors: list[Color],
                    texts: list[str], thickness: int = 2, font_scale: int = 2) -> None:
    """Outline every box (rotated ones as polygons) in its colour and put its text above it.

    Args:
        frame: writable planes.
        boxes_xyxy: float [N, 4] frame pixels (for rotated boxes: the unrotated box).
        angles_rad: float [N] clockwise rotation, or None.
        colors: N colours. texts: N strings ("" draws no label).
    """
    boxes = boxes_xyxy.round().long().tolist()
    angles = angles_rad.tolist() if angles_rad is not None else [0.0] * len(boxes)
    for (x1, y1, x2, y2), angle, color, text in zip(boxes, angles, colors, texts):
        if angle:
            corners = cxcywhr_to_corners(np.array([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, angle]))
            x1, y1 = paint_pixels(frame, *polygon_outline(corners, thickness), color)
        else:
            rect_outline(frame, x1, y1, x2, y2, thickness, color)
        if text:
            draw_label(frame, text, x1, y1, font_scale, (255, 255, 255), color)


COCO17_SKELETON: Final = ((15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8),
                          (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))
"""COCO's 17-keypoint limbs, 0-based (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles)."""


def blend_mask(frame: RawFrame, x: int, y: int, mask: Tensor, rgb: Color, alpha: float) -> None:
    """Blend ``rgb`` with weight ``alpha`` into the pixels where ``mask`` (uint8/bool [h, w], placed at (x, y)) is
    set; YUV frames blend luma per pixel and chroma where the mask's even pixels are set."""
    h, w = mask.shape
    cx1, cy1, cx2, cy2 = max(x, 0), max(y, 0), min(x + w, frame.width), min(y + h, frame.height)
    if cx1 >= cx2 or cy1 >= cy2:
        return
    sel = mask[cy1 - y : cy2 - y, cx1 - x : cx2 - x].numpy().astype(bool)
    if frame.format in _RGB_INDEX:
        targets = [(frame.planes[0][cy1:cy2, cx1:cx2][..., c], sel, v) for c, v in zip(_RGB_INDEX[frame.format], rgb)]
    else:
        yy, u, v = _yuv(rgb)
        half = (slice(cy1 // 2, (cy2 + 1) // 2), slice(cx1 // 2, (cx2 + 1) // 2))
        chroma = (frame.planes[1][half][..., 0], frame.planes[1][half][..., 1]) if frame.format == "NV12" \
            else (frame.planes[1][half], frame.planes[2][half])
        csel = sel[(cy1 % 2)::2, (cx1 % 2)::2]
        targets = [(frame.planes[0][cy1:cy2, cx1:cx2], sel, yy)]
        targets += [(plane[: csel.shape[0], : csel.shape[1]], csel[: plane.shape[0], : plane.shape[1]], value)
                    for plane, value in zip(chroma, (u, v))]
    for plane, where, value in targets:
        region = plane[: where.shape[0], : where.shape[1]]
        view = region.numpy() if isinstance(region, torch.Tensor) else region
        view[where] = (view[where] * (1.0 - alpha) + value * alpha + 0.5).astype(np.uint8)


def draw_skeleton(frame: RawFrame, keypoints: Tensor, edges: tuple[tuple[int, int], ...], rgb: Color,
                  min_score: float = 0.5, thickness: int = 2) -> None:
    """Limbs (``edges`` between keypoints both scoring ``>= min_score``) and a dot per such keypoint.

    Args:
        keypoints: float [K, 3] x, y, score in frame pixels.
    """
    pts = keypoints.tolist()
    seen = [s >= min_score for _, _, s in pts]
    lines = [np.array([pts[a][:2], pts[b][:2]]) for a, b in edges if a < len(pts) and b < len(pts) and seen[a]
             and seen[b]]
    if lines:
        ys, xs = zip(*(polygon_outline(line, thickness) for line in lines))
        paint_pixels(frame, np.concatenate(ys), np.concatenate(xs), rgb)
    r = thickness + 1
    for (px, py, _), ok in zip(pts, seen):
        if ok:
            fill_rect(frame, round(px) - r, round(py) - r, round(px) + r + 1, round(py) + r + 1, rgb)
