"""pyinfer's instance masks and keypoints equal ultralytics' own predict on the same weights, frames and thresholds.

Random-weight yolo11n-seg, yolo11n-pose and yolo26n-pose (end-to-end) built from their yaml (weights re-drawn,
seeded, as the detect parity test does), run through a real pipeline (appsrc ! pyinfer) on vtest.avi frames and
bus.jpg; the masks and keypoints are read back from the GstAnalytics metadata (SegmentationMtd / TensorMtd) and
compared with ``predict(retina_masks=True)``.
ultralytics letterboxes a .pt model to the minimal 32-multiple rectangle, so the input size is that rectangle.
"""
from __future__ import annotations

from pathlib import Path

import gi
import numpy as np
import pytest
import torch

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from gst_helpers import run_pipeline
from parity import assert_same_boxes, decode_frames, gap_threshold, matched, pyinfer_frames, random_yolo_checkpoints

from inferstream.meta.gstanalytics import read_detections
from inferstream.meta.instances import keypoints_supported

ultralytics = pytest.importorskip("ultralytics", reason="the reference predict needs the ultralytics extra")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tasks")
    return random_yolo_checkpoints(root, ((3, "yolo11n-seg"), (4, "yolo11n-pose"), (1, "yolo26n-pose")))


@pytest.fixture(scope="module")
def scenes(vtest: Path) -> list[tuple[list[np.ndarray], str]]:
    """Frames of one size each, with the input size ultralytics picks for them (width x height)."""
    video = decode_frames(f"filesrc location={vtest} ! decodebin", 81)
    bus = decode_frames(f"filesrc location={Path(ultralytics.__file__).parent / 'assets' / 'bus.jpg'} ! jpegdec", 1)
    return [([video[0], video[80]], "640x480"), (bus, "480x640")]


def _reference(model: Path, frames: list[np.ndarray], **kw: object) -> list[dict]:
    from ultralytics import YOLO

    threads = torch.get_num_threads()
    try:
        results = YOLO(str(model)).predict([f[:, :, ::-1] for f in frames], verbose=False, imgsz=640,
                                           retina_masks=True, **kw)
    finally:
        torch.set_num_threads(threads)
    return [{"xyxy": r.boxes.xyxy.numpy().round(), "conf": r.boxes.conf.numpy(), "names": [r.names[int(c)] for c in
             r.boxes.cls], "masks": None if r.masks is None else r.masks.data.numpy() > 0,
             "kpts": None if r.keypoints is None else r.keypoints.data.numpy()} for r in results]


def _compare(model: Path, scenes: list[tuple[list[np.ndarray], str]], **kw: object) -> list[tuple[dict, dict]]:
    """Our frames and the reference's, at a threshold in a gap of the reference's scores (all scenes pooled)."""
    pooled = np.concatenate([r["conf"] for frames, _ in scenes for r in _reference(model, frames, conf=0.001,
                                                                                    iou=0.7, max_det=300, **kw)])
    conf = gap_threshold(pooled, sum(len(frames) for frames, _ in scenes))
    pairs = []
    for frames, size in scenes:
        ours = pyinfer_frames(frames, f"model={model} input-size={size} confidence-threshold={conf} iou-threshold=0.7")
        ref = _reference(model, frames, conf=conf, iou=0.7, **kw)
        assert_same_boxes(ours, ref)
        pairs += zip(ours, ref)
    return pairs


def test_masks_match_ultralytics_retina_masks(models: dict[str, Path], scenes: list) -> None:
    ious = []
    for ours, ref in _compare(models["yolo11n-seg"], scenes):
        if not len(ref["xyxy"]):
            continue
        rows, cols = matched(ours, ref)
        for i, j in zip(rows, cols):
            a, b = ours["masks"][i], ref["masks"][j]
            ious.append((a & b).sum() / max((a | b).sum(), 1))
    print(f"{len(ious)} masks, median IoU {np.median(ious):.4f}, min {min(ious):.4f}")
    assert len(ious) >= 20 and np.median(ious) >= 0.9


@pytest.mark.parametrize("name", ["yolo11n-pose", "yolo26n-pose"])
def test_keypoints_match_ultralytics(name: str, models: dict[str, Path], scenes: list) -> None:
    """YOLO26-pose runs its end-to-end head in pyinfer; ultralytics' predict selects it with nms=False (its
    random-weight seg twin is not compared: its inverted boxes leave every mask empty, and both sides drop them)."""
    if not keypoints_supported():
        pytest.skip(f"{Gst.version_string()} has no GstAnalyticsTensorMtd (new in 1.28) to carry keypoints")
    kw = {"nms": False} if name.startswith("yolo26") else {}
    errors, scores = [], []
    for ours, ref in _compare(models[name], scenes if not kw else scenes[1:], **kw):
        if not len(ref["xyxy"]):
            continue
        rows, cols = matched(ours, ref)
        assert ours["kpts"].shape[1:] == (17, 3)
        errors.append(np.abs(ours["kpts"][rows, :, :2] - ref["kpts"][cols, :, :2]).ravel())
        scores.append(np.abs(ours["kpts"][rows, :, 2] - ref["kpts"][cols, :, 2]).ravel())
    err = np.concatenate(errors)
    print(f"{err.size // 2} keypoints, p95 error {np.percentile(err, 95):.4f} px")
    assert err.size >= 10 * 34 and np.percentile(err, 95) <= 2.0 and np.concatenate(scores).max() <= 0.02


def test_keypoints_left_out_with_one_warning_where_gstreamer_cannot_carry_them(models: dict[str, Path],
                                                                               vtest: Path) -> None:
    """GStreamer 1.26 (Debian 13) has no TensorMtd: a pose model still gives its boxes, and pyinfer says once that
    the keypoints are not written."""
    if keypoints_supported():
        pytest.skip(f"{Gst.version_string()} carries keypoints (test_keypoints_match_ultralytics)")
    pose = models["yolo11n-pose"]
    result = run_pipeline(f"filesrc location={vtest} ! decodebin ! videoconvert ! video/x-raw,format=RGB ! "
                          f"identity eos-after=3 ! pyinfer name=inf trust-checkpoint=true model={pose} "
                          "input-size=640x480 confidence-threshold=0.001 ! fakesink", {"inf": read_detections},
                          timeout_s=300)
    assert not result.errors, result.errors
    assert len(result.seen["inf"]) >= 2 and all(len(m.dets) > 0 and m.dets.keypoints is None
                                                 for m in result.seen["inf"])
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith(f"keypoints not written on {Gst.version_string()}: no "
                                         "GstAnalyticsTensorMtd, new in GStreamer 1.28")
