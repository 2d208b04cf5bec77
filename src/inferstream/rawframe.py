"""A frame as tensor views of its planes: what frames/ hands to ops/ (no GStreamer types cross this line); beside
detections.py so ops/ and models/ need nothing from frames/."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

PACKED_FORMATS: tuple[str, ...] = ("RGB", "BGR", "RGBA", "BGRA", "RGBx", "BGRx", "xRGB", "xBGR", "ARGB", "ABGR")
PLANAR_FORMATS: tuple[str, ...] = ("NV12", "I420")


@dataclass(frozen=True, slots=True)
class RawFrame:
    """Zero-copy views of one video frame; valid only while its buffer stays mapped.

    Attributes:
        format: a GStreamer video format name, one of PACKED_FORMATS or PLANAR_FORMATS.
        width, height: frame size in pixels.
        planes: uint8 views honouring the buffer's strides —
            packed: one ``Tensor[H, W, C]`` (C = 3 or 4, channel order as ``format`` names it);
            NV12: ``Y Tensor[H, W]``, ``UV Tensor[ceil(H/2), ceil(W/2), 2]``;
            I420: ``Y Tensor[H, W]``, ``U`` and ``V Tensor[ceil(H/2), ceil(W/2)]``.
        matrix: YUV→RGB matrix for planar formats, "bt601" or "bt709".
        full_range: True when YUV uses 0..255 (JPEG range) rather than 16..235.
    """

    format: str
    width: int
    height: int
    planes: tuple[Tensor, ...]
    matrix: str = "bt601"
    full_range: bool = False
