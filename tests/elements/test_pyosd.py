"""pyosd draws box outlines at the right pixels (axis-aligned and rotated) and a non-empty label region."""
from __future__ import annotations

import math
from pathlib import Path

import gi
import numpy as np
import pytest
import torch

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import Gst, GstVideo
from gst_helpers import inject, run_pipeline

from inferstream.detections import Detections
from inferstream.meta.gstanalytics import label_quarks, write_detections
from inferstream.meta.tracks import TrackRecord, write_tracks
from inferstream.ops.draw import id_color

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
W, H = 320, 240


def _attach(buf: Gst.Buffer, _index: int) -> None:
    dets = Detections(boxes_xyxy=torch.tensor([[40.0, 60.0, 140.0, 160.0], [200.0, 100.0, 280.0, 140.0]]),
                      scores=torch.tensor([0.9, 0.8]), labels=torch.tensor([0, 1]),
                      angles_rad=torch.tensor([0.0, math.pi / 4]))
    ids = write_detections(buf, dets, label_quarks(["person", "car"]))
    write_tracks(buf, [TrackRecord(ids[0], 7, 0, 0, False)])


def _rgb_frame(buf: Gst.Buffer, fmt: str) -> np.ndarray:
    """The drawn frame as RGB, converted here with a straightforward reference (not our ops)."""
    info = GstVideo.VideoInfo.new_from_caps(Gst.Caps.from_string(f"video/x-raw,format={fmt},width={W},height={H}"))
    ok, m = buf.map(Gst.MapFlags.READ)
    assert ok
    data = np.frombuffer(m.data, np.uint8).copy()
    buf.unmap(m)
    if fmt == "RGB":
        return np.lib.stride_tricks.as_strided(data, (H, W, 3), (info.stride[0], 3, 1)).copy()
    y = np.lib.stride_tricks.as_strided(data[info.offset[0]:], (H, W), (info.stride[0], 1)).astype(np.float32)
    uv = np.lib.stride_tricks.as_strided(data[info.offset[1]:], (H // 2, W // 2, 2), (info.stride[1], 2, 1))
    u = uv[..., 0].repeat(2, 0).repeat(2, 1).astype(np.float32) - 128
    v = uv[..., 1].repeat(2, 0).repeat(2, 1).astype(np.float32) - 128
    y = 1.164 * (y - 16)
    rgb = np.stack([y + 1.596 * v, y - 0.392 * u - 0.813 * v, y + 2.017 * u], axis=-1)
    return rgb.clip(0, 255).astype(np.uint8)


@pytest.mark.parametrize("fmt", ["RGB", "NV12"])
def test_pyosd_draws_axis_aligned_and_rotated_boxes(fmt: str) -> None:
    frames: list[np.ndarray] = []
    desc = (f"videotestsrc pattern=black num-buffers=1 ! video/x-raw,format={fmt},width={W},height={H} "
            "! testinject name=osdtag ! pyosd name=osd line-width=2 ! fakesink")
    inject("osdtag", _attach)
    result = run_pipeline(desc, {"osd": lambda buf: frames.append(_rgb_frame(buf, fmt))}, timeout_s=30)
    assert not result.errors and len(frames) == 1
    img = frames[0]
    ARTIFACTS.mkdir(exist_ok=True)
    _save_png(img, ARTIFACTS / f"pyosd_{fmt}.png")
    color = np.array(id_color(7))  # tracked box: colour of its track id
    tol = 40 if fmt == "NV12" else 0
    # axis-aligned box: outline on the left edge, background inside
    assert np.abs(img[110, 40].astype(int) - color).max() <= tol
    assert np.abs(img[110, 139].astype(int) - color).max() <= tol
    assert img[110, 90].max() <= 20
    # rotated box (45°): a corner of the rotated polygon is lit, its unrotated corner is not
    cx, cy, hw, hh = 240.0, 120.0, 40.0, 20.0
    corner = (cx + hw * math.cos(math.pi / 4) - hh * math.sin(math.pi / 4),
              cy + hw * math.sin(math.pi / 4) + hh * math.cos(math.pi / 4))
    patch = img[int(corner[1]) - 2:int(corner[1]) + 3, int(corner[0]) - 2:int(corner[0]) + 3]
    assert patch.max() > 100
    assert img[101, 201].max() <= 20  # top-left of the unrotated box stays dark
    # label region above the tracked box has text: white pixels on the label background
    label = img[40:60, 40:140]
    assert (label.min(axis=-1) > 200).sum() > 20


def _save_png(img: np.ndarray, path: Path) -> None:
    desc = (f"appsrc name=src caps=video/x-raw,format=RGB,width={img.shape[1]},height={img.shape[0]},framerate=1/1 "
            f"! videoconvert ! pngenc ! filesink location={path}")
    pipeline = Gst.parse_launch(desc)
    src = pipeline.get_by_name("src")
    pipeline.set_state(Gst.State.PLAYING)
    src.emit("push-buffer", Gst.Buffer.new_wrapped(np.ascontiguousarray(img).tobytes()))
    src.emit("end-of-stream")
    pipeline.get_bus().timed_pop_filtered(10 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
