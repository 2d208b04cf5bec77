"""Shared by the parity tests of every model family: frames through a real pipeline, boxes matched to a reference.

GstAnalytics ODMtd stores whole pixels, so a reference's axis-aligned boxes are compared after rounding their
edges: that is the most any element can write.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import gi
import numpy as np
import torch
from gst_helpers import run_pipeline
from scipy.optimize import linear_sum_assignment

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.gstcompat import structure
from inferstream.meta.gstanalytics import read_detections

MEDIAN_IOUS: list[float] = []


def decode_frames(desc: str, count: int) -> list[np.ndarray]:
    """RGB frames (H, W, 3) decoded by a real GStreamer pipeline ending in ``appsink name=out``."""
    pipeline = Gst.parse_launch(desc + " ! videoconvert ! video/x-raw,format=RGB ! appsink name=out sync=false")
    sink = pipeline.get_by_name("out")
    pipeline.set_state(Gst.State.PLAYING)
    frames = []
    for _ in range(count):
        sample = sink.emit("try-pull-sample", 20 * Gst.SECOND)
        if sample is None:
            break
        s = structure(sample.get_caps().get_structure(0))
        w, h = s.get_value("width"), s.get_value("height")
        buf = sample.get_buffer()
        _, m = buf.map(Gst.MapFlags.READ)
        stride = len(m.data) // h
        frames.append(np.frombuffer(m.data, np.uint8).reshape(h, stride)[:, :w * 3].reshape(h, w, 3).copy())
        buf.unmap(m)
    pipeline.set_state(Gst.State.NULL)
    return frames


def pyinfer_frames(frames: list[np.ndarray], props: str) -> list[dict[str, np.ndarray]]:
    """Push the frames through appsrc ! pyinfer and read the detections back from the metadata (one pipeline per
    run of frames of one size)."""
    out: list[dict[str, np.ndarray]] = []
    start = 0
    for end in range(1, len(frames) + 1):
        if end == len(frames) or frames[end].shape != frames[start].shape:
            out += _pyinfer_same_size(frames[start:end], props)
            start = end
    return out


def _pyinfer_same_size(frames: list[np.ndarray], props: str) -> list[dict[str, np.ndarray]]:
    h, w, _ = frames[0].shape
    out: list[dict[str, np.ndarray]] = []

    def grab(buf: Gst.Buffer) -> None:
        meta = read_detections(buf)
        d = meta.dets
        out.append({"xyxy": d.boxes_xyxy.numpy(), "conf": d.scores.numpy(),
                    "cls": np.array([int(meta.label_names[i].removeprefix("class")) if meta.label_names[i]
                                     .startswith("class") else i for i in d.labels.tolist()]),
                    "names": [meta.label_names[i] for i in d.labels.tolist()],
                    "r": d.angles_rad.numpy() if d.angles_rad is not None else np.zeros(len(d)),
                    "masks": full_masks(d.masks, d.boxes_xyxy.numpy(), (h, w)) if d.masks is not None else None,
                    "kpts": d.keypoints.numpy() if d.keypoints is not None else None})

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


def full_masks(crops: tuple, boxes: np.ndarray, hw: tuple[int, int]) -> np.ndarray:
    """Box-sized mask crops (``Detections.masks``) placed in ``(N, H, W)`` bool frames, as ultralytics returns
    retina masks."""
    out = np.zeros((len(crops), *hw), bool)
    for i, (crop, box) in enumerate(zip(crops, boxes)):
        x, y = np.round(box[:2]).astype(int)
        out[i, y : y + crop.shape[0], x : x + crop.shape[1]] = crop.numpy() > 0
    return out


def matched(ours: dict, ref: dict) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``ours`` and ``ref`` paired by box IoU (Hungarian)."""
    return linear_sum_assignment(-box_iou(ours["xyxy"], ref["xyxy"]))


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU; edges are sorted first because random-weight heads without DFL (YOLO26) can emit inverted
    boxes, which both implementations must then agree on too."""
    a = np.concatenate([np.minimum(a[:, :2], a[:, 2:]), np.maximum(a[:, :2], a[:, 2:])], axis=1)
    b = np.concatenate([np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])], axis=1)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)
    area = lambda x: (x[:, 2:] - x[:, :2]).prod(-1)
    return inter / (area(a)[:, None] + area(b)[None, :] - inter + 1e-9)


def assert_same_boxes(ours: list[dict], ref: list[dict], oriented: bool = False, min_iou: float = 0.98) -> None:
    """Same count and classes per frame, scores within 0.02, every matched box IoU >= ``min_iou``."""
    assert len(ours) == len(ref)
    ious = []
    for frame, (o, r) in enumerate(zip(ours, ref)):
        assert len(o["xyxy"]) == len(r["xyxy"]), f"frame {frame}: {len(o['xyxy'])} boxes vs reference {len(r['xyxy'])}"
        if not len(r["xyxy"]):
            continue
        iou = box_iou(o["xyxy"], r["xyxy"])
        rows, cols = linear_sum_assignment(-iou)
        ious += iou[rows, cols].tolist()
        assert o["names"] and [o["names"][i] for i in rows] == [r["names"][j] for j in cols], f"frame {frame}: classes"
        assert np.abs(o["conf"][rows] - r["conf"][cols]).max() <= 0.02, f"frame {frame}: scores"
        if oriented:
            d = np.abs(o["r"][rows] - r["r"][cols]) % math.pi
            assert np.minimum(d, math.pi - d).max() <= 0.02, f"frame {frame}: angles"
    assert ious and min(ious) >= min_iou, f"min IoU {min(ious):.4f}"
    MEDIAN_IOUS.append(float(np.median(ious)))
    print(f"matched {len(ious)} boxes, median IoU {np.median(ious):.5f}, min {min(ious):.5f}")




def gap_threshold(scores: np.ndarray, frames: int) -> float:
    """A confidence threshold in a wide gap of a reference's scores (all frames pooled), about 10-40 boxes per
    frame, so that float noise cannot move a box across it."""
    scores = np.sort(scores)[::-1]
    k = np.arange(10 * frames, min(40 * frames, len(scores) - 1))
    best = k[np.argmax(scores[k] - scores[k + 1])]
    return float((scores[best] + scores[best + 1]) / 2)


def randomise_yolo(model: torch.nn.Module, seed: int) -> None:
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


def random_yolo_checkpoints(root: Path, models: Sequence[tuple[int, str]]) -> dict[str, Path]:
    """``{name: path}`` of ultralytics models built from ``<name>.yaml`` with ``randomise_yolo(seed)`` weights and saved
    as checkpoints in ``root`` (ultralytics' predict and pyinfer then load the same file)."""
    from ultralytics import YOLO

    threads = torch.get_num_threads()
    paths = {}
    try:
        for seed, name in models:
            model = YOLO(f"{name}.yaml")
            randomise_yolo(model.model, seed)
            paths[name] = root / f"{name}.pt"
            model.save(paths[name])
    finally:
        torch.set_num_threads(threads)
    return paths
