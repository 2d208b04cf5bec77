"""FrameEvent / ObjectEvent validation and the Detections adapter."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from inferstream.detections import Detections
from inferstream.messaging.events import FrameEvent, ObjectEvent


def test_object_event_normalises_numbers() -> None:
    obj = ObjectEvent("car", 2, 1, (1, 2, 3, 4), track_id=5)
    assert obj.bbox == (1.0, 2.0, 3.0, 4.0) and isinstance(obj.confidence, float)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"bbox": (1, 2, 3)}, r"bbox must be \(x1, y1, x2, y2\), got 3"),
    ({"bbox": (5, 0, 1, 1)}, "x2 >= x1"),
    ({"bbox": (0, 0, float("nan"), 1)}, "finite"),
    ({"confidence": 1.5}, r"confidence must be in \[0, 1\]"),
])
def test_object_event_rejects_bad_values(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"label": "car", "class_id": 0, "confidence": 0.5, "bbox": (0, 0, 1, 1), **kwargs}
    with pytest.raises(ValueError, match=match):
        ObjectEvent(**args)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"width": 0}, "frame size must be positive"),
    ({"source_id": -1}, "must be >= 0"),
])
def test_frame_event_rejects_bad_values(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"stream_id": "s", "source_id": 0, "frame_number": 0, "pts_ns": 0, "ntp_ns": None,
                            "width": 10, "height": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        FrameEvent(**args)


def test_frame_event_from_detections_keeps_rows_in_order() -> None:
    dets = Detections(torch.tensor([[0, 0, 10, 10], [5, 5, 8, 9]], dtype=torch.float32),
                      torch.tensor([0.9, 0.4]), torch.tensor([1, 0]), torch.tensor([0.5, -0.25]),
                      torch.tensor([-1, 12]))
    ev = FrameEvent.from_detections(dets, ["person", "car"], stream_id="s", source_id=1, frame_number=3, pts_ns=9,
                                    ntp_ns=None, width=64, height=48)
    assert [o.label for o in ev.objects] == ["car", "person"]
    assert [o.track_id for o in ev.objects] == [None, 12]
    assert ev.objects[1].angle_rad == pytest.approx(-0.25) and ev.objects[1].bbox == (5.0, 5.0, 8.0, 9.0)


def test_frame_event_from_detections_rejects_unknown_class() -> None:
    dets = Detections(torch.zeros((1, 4)), torch.ones(1), torch.tensor([3]))
    with pytest.raises(ValueError, match="class index 3 outside the label list of 2 labels"):
        FrameEvent.from_detections(dets, ["a", "b"], stream_id="s", source_id=0, frame_number=0, pts_ns=0,
                                   ntp_ns=None, width=4, height=4)
