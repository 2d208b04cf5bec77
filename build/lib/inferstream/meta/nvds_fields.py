"""What nvinfer writes into each ``NvDsObjectMeta``, computed from Detections: no GStreamer, no DeepStream.

``meta/nvds.py`` copies these values into pyservicemaker objects; keeping the arithmetic here lets CPU tests pin
every field against nvinfer's own code (``gst-nvinfer/gstnvinfer_meta_utils.cpp``, ``attach_metadata_detector``):

- ``rect_params`` in the muxer's (pipeline) resolution: the frame's pixels scaled by muxer / frame size; ``left``
  and ``top`` clamped at 0 (nvinfer clamps them without shrinking the box); ``rotation_angle`` in degrees
  (nvinfer: radians x 57.2957795) for oriented boxes, 0 otherwise;
- ``border_width`` 3; colours as nvinfer without ``[class-attrs-N]`` colours: red border ``(1, 0, 0, 1)``, no
  background (``bg_color`` 0);
- ``obj_label`` = the label, cut to 127 bytes (``g_strlcpy`` into ``MAX_LABEL_SIZE`` 128);
- ``text_params``: ``display_text`` = the whole label (``g_strdup``), ``x_offset`` = left, ``y_offset`` = top - 10, Serif 11 white
  ``(1, 1, 1, 1)`` on black ``(0, 0, 0, 1)``. Both offsets are ``unsigned int`` in ``NvOSD_TextParams``; nvinfer
  converts a negative float (a box within 10 px of the top) with undefined behaviour, we clamp at 0;
- ``unique_component_id`` = the element's ``unique-id`` (nvinfer's ``gie-unique-id``), ``object_id`` =
  ``UNTRACKED_OBJECT_ID``, ``class_id``, ``confidence``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from inferstream.detections import Detections

UNTRACKED_OBJECT_ID: Final = 0xFFFFFFFFFFFFFFFF  # nvdsmeta.h
MAX_LABEL_BYTES: Final = 127  # MAX_LABEL_SIZE (128) less the NUL g_strlcpy keeps
BORDER_WIDTH: Final = 3
RAD_TO_DEG: Final = 57.2957795  # nvinfer's constant, float32 in C
TEXT_FONT: Final = "Serif"
TEXT_SIZE: Final = 11
TEXT_ABOVE_PX: Final = 10

Color = tuple[float, float, float, float]  # r, g, b, a in [0, 1] (NvOSD_ColorParams)
BORDER_COLOR: Final[Color] = (1.0, 0.0, 0.0, 1.0)
NO_COLOR: Final[Color] = (0.0, 0.0, 0.0, 0.0)
TEXT_COLOR: Final[Color] = (1.0, 1.0, 1.0, 1.0)
TEXT_BG_COLOR: Final[Color] = (0.0, 0.0, 0.0, 1.0)


@dataclass(frozen=True, slots=True)
class ObjectFields:
    """One ``NvDsObjectMeta`` as nvinfer fills it; pixels in the muxer's resolution."""

    unique_component_id: int
    class_id: int
    object_id: int
    confidence: float
    left: float
    top: float
    width: float
    height: float
    rotation_angle_deg: float
    label: str  # obj_label
    display_text: str
    text_x: int
    text_y: int
    border_width: int = BORDER_WIDTH
    border_color: Color = BORDER_COLOR
    has_bg_color: bool = False
    bg_color: Color = NO_COLOR


def muxer_scale(frame_size: tuple[int, int], muxer_size: tuple[int, int]) -> tuple[float, float]:
    """``(sx, sy)`` taking the pixels of a ``frame_size`` (width, height) surface to the muxer's ``muxer_size``.

    Raises:
        ValueError: a size that is not positive.
    """
    if min(*frame_size, *muxer_size) <= 0:
        raise ValueError(f"sizes must be positive, got frame {frame_size} and muxer {muxer_size}")
    return muxer_size[0] / frame_size[0], muxer_size[1] / frame_size[1]


def obj_label(label: str) -> str:
    """``label`` as ``obj_label`` holds it: at most 127 UTF-8 bytes, never a split character."""
    data = label.encode()
    return label if len(data) <= MAX_LABEL_BYTES else data[:MAX_LABEL_BYTES].decode(errors="ignore")


def object_fields(dets: Detections, labels: Sequence[str], frame_size: tuple[int, int],
                  muxer_size: tuple[int, int], unique_id: int) -> list[ObjectFields]:
    """The ``NvDsObjectMeta`` fields of one frame's detections, in row order.

    Args:
        dets: CPU detections in the pixels of the inferred surface (oriented boxes unrotated + ``angles_rad``).
        labels: the model's label per class index (``ModelStep.labels``).
        frame_size: ``(width, height)`` of the inferred surface.
        muxer_size: ``(width, height)`` of the muxer's output (``frame_meta.pipeline_width/height``).
        unique_id: the producer id (``unique_component_id``).

    Raises:
        ValueError: a class index outside ``labels``, or a bad size.
    """
    sx, sy = muxer_scale(frame_size, muxer_size)
    boxes = dets.boxes_xyxy.tolist()
    angles = dets.angles_rad.tolist() if dets.angles_rad is not None else [0.0] * len(boxes)
    out = []
    for (x1, y1, x2, y2), score, cls, angle in zip(boxes, dets.scores.tolist(), dets.labels.tolist(), angles):
        if not 0 <= cls < len(labels):
            raise ValueError(f"class index {cls} outside the model's {len(labels)} labels")
        left, top = max(x1 * sx, 0.0), max(y1 * sy, 0.0)
        out.append(ObjectFields(
            unique_component_id=unique_id, class_id=cls, object_id=UNTRACKED_OBJECT_ID, confidence=score,
            left=left, top=top, width=(x2 - x1) * sx, height=(y2 - y1) * sy,
            rotation_angle_deg=angle * RAD_TO_DEG, label=obj_label(labels[cls]), display_text=labels[cls],
            text_x=int(left), text_y=max(int(top - TEXT_ABOVE_PX), 0)))
    return out
