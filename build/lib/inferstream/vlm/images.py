"""Frame pixels to the RGB images a VLM takes: channel order from the packed format, crops clipped to the frame."""
from __future__ import annotations

from typing import Final

import numpy as np

# where R, G, B sit in each packed format's pixel
RGB_CHANNELS: Final = {"RGB": (0, 1, 2), "BGR": (2, 1, 0), "RGBA": (0, 1, 2), "RGBx": (0, 1, 2), "BGRA": (2, 1, 0),
                       "BGRx": (2, 1, 0), "ARGB": (1, 2, 3), "xRGB": (1, 2, 3), "ABGR": (3, 2, 1), "xBGR": (3, 2, 1)}


def rgb_copy(pixels: np.ndarray, fmt: str, box_xyxy: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """An owned ``[h, w, 3]`` uint8 RGB copy of ``pixels`` (a packed ``[H, W, C]`` view in format ``fmt``),
    optionally only the region ``box_xyxy`` (frame pixels, clipped to the frame; may come out empty)."""
    if box_xyxy is not None:
        h, w = pixels.shape[:2]
        x1, y1, x2, y2 = box_xyxy
        pixels = pixels[max(0, y1):min(h, y2), max(0, x1):min(w, x2)]
    return np.ascontiguousarray(pixels[:, :, list(RGB_CHANNELS[fmt])])
