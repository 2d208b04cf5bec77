"""Neutral input of the messaging layer: what one frame's detections look like once they left the GPU.

Plain Python values (no tensors, no ``gi``): an element turns its Detections into a :class:`FrameEvent` with one
``.tolist()`` per field (:meth:`FrameEvent.from_detections`) and hands it to a converter in ``schema.py``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from inferstream.detections import Detections


@dataclass(frozen=True, slots=True)
class ObjectEvent:
    """One detected object in the frame's own pixel space.

    Attributes:
        label: class name (``"person"``); becomes the object type key of the DeepStream payload.
        class_id: index of ``label`` in the model's label list.
        confidence: detector score in [0, 1].
        bbox: ``(x1, y1, x2, y2)`` in pixels of the frame (``x2 >= x1``, ``y2 >= y1``). For oriented boxes this is
            the unrotated box, the rotation is ``angle_rad``.
        angle_rad: clockwise rotation of an oriented box in radians, ``None`` for axis-aligned boxes.
        track_id: tracker id, ``None`` when the object is not tracked.
        attributes: secondary classifications ``(classifier_type, label, confidence)``, e.g.
            ``("color", "red", 0.9)``.
        mask: the instance mask as ``(x, y, height, width, counts)``: COCO's uncompressed RLE of the box-sized crop
            placed with its top-left pixel at (x, y) of the frame — column-major runs, the first one of zeros (see
            :func:`mask_rle`). ``None`` without a mask.
        keypoints: ``((x, y, score), ...)`` in frame pixels, ``None`` without keypoints.
    """

    label: str
    class_id: int
    confidence: float
    bbox: tuple[float, float, float, float]
    angle_rad: float | None = None
    track_id: int | None = None
    attributes: tuple[tuple[str, str, float], ...] = ()
    mask: tuple[int, int, int, int, tuple[int, ...]] | None = None
    keypoints: tuple[tuple[float, float, float], ...] | None = None

    def __post_init__(self) -> None:
        if len(self.bbox) != 4:
            raise ValueError(f"bbox must be (x1, y1, x2, y2), got {len(self.bbox)} values: {self.bbox!r}")
        x1, y1, x2, y2 = (float(v) for v in self.bbox)
        if not all(math.isfinite(v) for v in (x1, y1, x2, y2)) or x2 < x1 or y2 < y1:
            raise ValueError(f"bbox must be finite with x2 >= x1 and y2 >= y1, got {self.bbox!r}")
        if not 0.0 <= float(self.confidence) <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence!r}")
        object.__setattr__(self, "bbox", (x1, y1, x2, y2))
        object.__setattr__(self, "confidence", float(self.confidence))
        object.__setattr__(self, "class_id", int(self.class_id))
        if self.angle_rad is not None:
            object.__setattr__(self, "angle_rad", float(self.angle_rad))
        if self.track_id is not None:
            object.__setattr__(self, "track_id", int(self.track_id))
        object.__setattr__(self, "attributes", tuple((str(k), str(v), float(c)) for k, v, c in self.attributes))


@dataclass(frozen=True, slots=True)
class FrameEvent:
    """All objects of one frame of one stream.

    Attributes:
        stream_id: stable name of the stream (sensor id fallback when the msgconv config has no ``sensorN``).
        source_id: numeric source index (selects ``sensorN`` / ``placeN`` / ``analyticsN`` of the config).
        frame_number: frame counter of this stream, from 0.
        pts_ns: buffer PTS in nanoseconds (running time of the stream).
        ntp_ns: wall-clock capture time in ns since the Unix epoch when known (RTSP NTP / capture clock), else
            ``None`` and the converter stamps the conversion time.
        width: frame width in pixels.
        height: frame height in pixels.
        objects: the detections, in model output order.
    """

    stream_id: str
    source_id: int
    frame_number: int
    pts_ns: int
    ntp_ns: int | None
    width: int
    height: int
    objects: tuple[ObjectEvent, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"frame size must be positive, got {self.width}x{self.height}")
        if self.source_id < 0 or self.frame_number < 0:
            raise ValueError(f"source_id and frame_number must be >= 0, got {self.source_id}, {self.frame_number}")
        object.__setattr__(self, "objects", tuple(self.objects))

    @classmethod
    def from_detections(
        cls,
        dets: Detections,
        labels: Sequence[str],
        *,
        stream_id: str,
        source_id: int,
        frame_number: int,
        pts_ns: int,
        ntp_ns: int | None,
        width: int,
        height: int,
        attributes: Sequence[Sequence[tuple[str, str, float]]] | None = None,
    ) -> FrameEvent:
        """Build the event from a :class:`~inferstream.detections.Detections` (one host copy per field, R12).

        Args:
            dets: the frame's detections (any device); ``track_ids`` of -1 mean untracked.
            labels: the model's label list, indexed by ``dets.labels``.
            stream_id, source_id, frame_number, pts_ns, ntp_ns, width, height: see the class attributes.
            attributes: per row, its classifications (``ObjectEvent.attributes``); None: none.

        Returns:
            FrameEvent with one ObjectEvent per row of ``dets``, in row order.

        Raises:
            ValueError: a class index outside ``labels``.
        """
        boxes = dets.boxes_xyxy.tolist()
        scores = dets.scores.tolist()
        class_ids = dets.labels.tolist()
        angles = dets.angles_rad.tolist() if dets.angles_rad is not None else [None] * len(boxes)
        tracks = dets.track_ids.tolist() if dets.track_ids is not None else [-1] * len(boxes)
        extra = attributes if attributes is not None else [()] * len(boxes)
        if len(extra) != len(boxes):
            raise ValueError(f"attributes: expected one entry per detection ({len(boxes)}), got {len(extra)}")
        masks = [None] * len(boxes) if dets.masks is None else [
            (*origin, *crop.shape, mask_rle(crop.numpy())) for origin, crop in
            zip(dets.boxes_xyxy[:, :2].round().int().tolist(), dets.masks)]
        kpts = [None] * len(boxes) if dets.keypoints is None else [tuple(map(tuple, k)) for k in
                                                                    dets.keypoints.tolist()]
        objects = []
        for box, score, cid, angle, tid, attrs, mask, kp in zip(boxes, scores, class_ids, angles, tracks, extra,
                                                                 masks, kpts):
            if not 0 <= cid < len(labels):
                raise ValueError(f"class index {cid} outside the label list of {len(labels)} labels")
            objects.append(ObjectEvent(labels[cid], cid, min(max(score, 0.0), 1.0), tuple(box), angle,
                                       None if tid < 0 else tid, attributes=tuple(attrs), mask=mask, keypoints=kp))
        return cls(stream_id, source_id, frame_number, pts_ns, ntp_ns, width, height, tuple(objects))


def mask_rle(mask: np.ndarray) -> tuple[int, ...]:
    """COCO's uncompressed RLE ``counts`` of a 2-D 0/1 mask: alternating run lengths of 0s and 1s over the pixels in
    column-major (Fortran) order, the first run of 0s (0 when the first pixel is set). ``pycocotools`` reads it as
    ``{"size": [h, w], "counts": counts}``."""
    import numpy as np

    flat = (np.asarray(mask).T.reshape(-1) != 0).astype(np.int8)
    change = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate(([0], change, [flat.size]))
    runs = np.diff(bounds).tolist()
    return tuple([0, *runs] if flat.size and flat[0] else runs)
