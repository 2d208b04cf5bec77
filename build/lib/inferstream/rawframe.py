"""A frame as tensor views of its planes: what frames/ hands to ops/ (no GStreamer types cross this line); beside
detections.py so ops/ and models/ need nothing from frames/."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

PACKED_FORMATS: tuple[str, ...] = ("RGB", "BGR", "RGBA", "BGRA", "RGBx", "BGRx", "xRGB", "xBGR", "ARGB", "ABGR")
PLANAR_FORMATS: tuple[str, ...] = ("NV12", "I420")
SUPPORTED_FORMATS: tuple[str, ...] = PACKED_FORMATS + PLANAR_FORMATS


def plane_specs(fmt: str, width: int, height: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The one format/plane table: per plane of a ``fmt`` frame, its uint8 view's shape and the byte strides after
    the row pitch (the pitch itself comes from the buffer). ``fmt`` must be one of ``SUPPORTED_FORMATS``.

    Packed: ``(H, W, C)``, strides ``(C, 1)``; NV12: ``Y (H, W)`` ``(1,)`` and ``UV (ceil(H/2), ceil(W/2), 2)``
    ``(2, 1)``; I420: ``Y (H, W)``, ``U`` and ``V (ceil(H/2), ceil(W/2))``, each ``(1,)``.
    """
    if fmt in PACKED_FORMATS:
        c = 3 if len(fmt) == 3 else 4
        return (((height, width, c), (c, 1)),)
    ch, cw = (height + 1) // 2, (width + 1) // 2
    if fmt == "NV12":
        return (((height, width), (1,)), ((ch, cw, 2), (2, 1)))
    if fmt == "I420":
        return (((height, width), (1,)), ((ch, cw), (1,)), ((ch, cw), (1,)))
    raise ValueError(f"format: expected one of {list(SUPPORTED_FORMATS)}, got {fmt!r}")


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
