"""Draw boxes, rotated boxes and labels into a frame's planes in place (RGB-family, NV12, I420).

Every primitive becomes a set of pixel coordinates built with tensor ops (no Python loop over pixels), and one
``paint`` writes a colour there in whatever layout the frame has (for YUV: luma at full, chroma at half resolution).
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Final

import torch

from inferstream.ops.font5x7 import GLYPH_H, GLYPH_W, GLYPHS

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.frames.raw import RawFrame

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


def paint(frame: RawFrame, ys: Tensor, xs: Tensor, rgb: Color) -> None:
    """Set the pixels (ys[i], xs[i]) of ``frame`` to ``rgb``; coordinates outside the frame are ignored.

    Args:
        frame: a frame whose planes are writable views.
        ys, xs: int64 [K] pixel rows and columns.
        rgb: 8-bit colour.
    """
    inside = (ys >= 0) & (ys < frame.height) & (xs >= 0) & (xs < frame.width)
    ys, xs = ys[inside], xs[inside]
    if frame.format in _RGB_INDEX:
        plane = frame.planes[0]
        idx = torch.tensor(_RGB_INDEX[frame.format], device=plane.device)
        plane[ys[:, None], xs[:, None], idx[None, :]] = torch.tensor(rgb, dtype=torch.uint8, device=plane.device)
        return
    y, u, v = _yuv(rgb)
    frame.planes[0][ys, xs] = y
    cy, cx = ys // 2, xs // 2
    if frame.format == "NV12":
        frame.planes[1][cy, cx] = torch.tensor((u, v), dtype=torch.uint8, device=frame.planes[1].device)
    else:  # I420
        frame.planes[1][cy, cx] = u
        frame.planes[2][cy, cx] = v


def _grid(y0: int, x0: int, h: int, w: int) -> tuple[Tensor, Tensor]:
    ys = torch.arange(y0, y0 + max(h, 0)).repeat_interleave(max(w, 0))
    xs = torch.arange(x0, x0 + max(w, 0)).repeat(max(h, 0))
    return ys, xs


def rect_outline(x1: int, y1: int, x2: int, y2: int, thickness: int) -> tuple[Tensor, Tensor]:
    """Pixels of an axis-aligned box outline, ``thickness`` pixels wide, inside [x1, x2) x [y1, y2)."""
    t = max(1, min(thickness, (x2 - x1 + 1) // 2, (y2 - y1 + 1) // 2))
    bands = [_grid(y1, x1, t, x2 - x1), _grid(y2 - t, x1, t, x2 - x1),
             _grid(y1 + t, x1, y2 - y1 - 2 * t, t), _grid(y1 + t, x2 - t, y2 - y1 - 2 * t, t)]
    return torch.cat([b[0] for b in bands]), torch.cat([b[1] for b in bands])


def filled_rect(x1: int, y1: int, x2: int, y2: int) -> tuple[Tensor, Tensor]:
    return _grid(y1, x1, y2 - y1, x2 - x1)


def rotated_corners(cx: float, cy: float, w: float, h: float, angle_rad: float) -> Tensor:
    """Corners [4, 2] (x, y) of a w x h box centred at (cx, cy), rotated clockwise (image y down) by angle_rad."""
    c, s = math.cos(angle_rad), math.sin(angle_rad)
    local = torch.tensor([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
    rot = torch.tensor([[c, s], [-s, c]])  # row vectors: [x, y] @ rot = [x c - y s, x s + y c]
    return local @ rot + torch.tensor([cx, cy])


def polygon_outline(corners: Tensor, thickness: int) -> tuple[Tensor, Tensor]:
    """Pixels of a closed polygon's edges; corners float [K, 2] (x, y)."""
    start, end = corners, corners.roll(-1, dims=0)
    n = int(torch.ceil((end - start).norm(dim=1).max()).item()) + 1
    t = torch.linspace(0, 1, n)
    pts = start[:, None, :] + (end - start)[:, None, :] * t[None, :, None]  # [K, n, 2]
    r = torch.arange(thickness) - (thickness - 1) // 2
    offs = torch.stack(torch.meshgrid(r, r, indexing="ij"), dim=-1).reshape(-1, 2).float()  # [T*T, 2]
    px = (pts.reshape(-1, 1, 2) + offs[None]).reshape(-1, 2).round().long()
    return px[:, 1], px[:, 0]


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
    paint(frame, *filled_rect(x, y - h, x + w, y), bg)
    ty, tx = mask.nonzero(as_tuple=True)
    paint(frame, ty + (y - h + scale), tx + (x + scale), fg)


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
            corners = rotated_corners((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, angle)
            paint(frame, *polygon_outline(corners, thickness), color)
            x1, y1 = int(corners[:, 0].min()), int(corners[:, 1].min())
        else:
            paint(frame, *rect_outline(x1, y1, x2, y2, thickness), color)
        if text:
            draw_label(frame, text, x1, y1, font_scale, (255, 255, 255), color)
