"""ModelStep: which input each batch runs at (yolo predict's rectangle where the model takes any size).

Real person detector (.pt and its fixed 640x640 ONNX export), real vtest frames; the reference is ultralytics'
own predict on the same frames.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from parity import assert_same_boxes, decode_frames

from inferstream.errors import ConfigError
from inferstream.inference import InferConfig, ModelStep
from inferstream.rawframe import RawFrame

ultralytics = pytest.importorskip("ultralytics", reason="the reference predict needs the ultralytics extra")


def _rgb(img: np.ndarray) -> RawFrame:
    img = np.ascontiguousarray(img)
    return RawFrame("RGB", img.shape[1], img.shape[0], (torch.from_numpy(img),))


def _as_dicts(detector: ModelStep, frames: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Detections as parity.assert_same_boxes reads them, boxes at whole pixels as pyinfer writes them."""
    return [{"xyxy": d.boxes_xyxy.numpy().round(), "conf": d.scores.numpy(), "names": [detector.labels[i] for i in
                                                                              d.labels.tolist()]}
            for d in detector.infer([_rgb(f) for f in frames])]


def test_detector_mixed_batch_shares_one_shape_that_keeps_each_frames_scale_as_predict(vtest: Path,
                                                                                      person_pt: Path) -> None:
    """A landscape and a portrait frame in one batch: the common shape is 640x640, where predict (which falls back
    to its square for frames of mixed sizes) runs too, so the boxes are predict's."""
    from ultralytics import YOLO

    frame = decode_frames(f"filesrc location={vtest} ! decodebin", 1)[0]
    frames = [frame, frame.transpose(1, 0, 2)]
    detector = ModelStep(InferConfig(model=str(person_pt), trust_checkpoint=True))
    assert detector.rect_stride == 32
    threads = torch.get_num_threads()
    results = YOLO(str(person_pt)).predict([np.ascontiguousarray(f[:, :, ::-1]) for f in frames], conf=0.25,
                                            iou=0.45, verbose=False)
    torch.set_num_threads(threads)
    ref = [{"xyxy": r.boxes.xyxy.numpy().round(), "conf": r.boxes.conf.numpy(),
            "names": [r.names[int(c)] for c in r.boxes.cls]} for r in results]
    assert min(len(r["xyxy"]) for r in ref) >= 3
    assert_same_boxes(_as_dicts(detector, frames), ref)


def test_detector_keeps_a_given_or_fixed_input_size(person_pt: Path, person_onnx: Path) -> None:
    assert ModelStep(InferConfig(model=str(person_pt), trust_checkpoint=True, input_size=(640, 640))).rect_stride \
        is None
    assert ModelStep(InferConfig(model=str(person_onnx))).rect_stride is None  # exported at a fixed 640x640


def test_detector_auto_rect_for_a_fixed_input_model_is_a_config_error(person_onnx: Path) -> None:
    with pytest.raises(ConfigError, match="auto-rect: not for this model, the model's input is fixed at 640x640"):
        ModelStep(InferConfig(model=str(person_onnx), rect=True))
