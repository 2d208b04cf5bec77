"""Masks and keypoints as GstAnalytics metadata in real pipelines: they read back as written, stock
``segmentationoverlay`` draws our SegmentationMtds, pyosd blends masks and draws skeletons, pytracker keeps them with
their boxes."""
from __future__ import annotations

from pathlib import Path

import gi
import numpy as np
import pytest
import torch

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from gst_helpers import inject, run_pipeline
from parity import decode_frames, pyinfer_frames, randomise_yolo

from inferstream.detections import Detections
from inferstream.meta.gstanalytics import label_quarks, read_detections, write_detections
from inferstream.meta.instances import keypoints_supported, write_instances
from inferstream.ops.draw import id_color

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
W, H = 320, 240
SRC = f"videotestsrc num-buffers=1 pattern=black ! video/x-raw,format=RGB,width={W},height={H}"


def _known() -> Detections:
    """Two objects: a disc mask in the first box, a bar in the second; the second has a visible T of keypoints."""
    yy, xx = np.mgrid[0:80, 0:100]
    disc = torch.from_numpy((((yy - 40) ** 2 + (xx - 50) ** 2) < 35 ** 2).astype(np.uint8))
    bar = torch.zeros((40, 60), dtype=torch.uint8)
    bar[10:30, :] = 1
    kpts = torch.zeros((2, 17, 3))
    kpts[1, 5] = torch.tensor([210.0, 150.0, 0.9])  # left shoulder
    kpts[1, 6] = torch.tensor([260.0, 150.0, 0.9])  # right shoulder
    kpts[1, 11] = torch.tensor([215.0, 200.0, 0.9])  # left hip
    return Detections(boxes_xyxy=torch.tensor([[20.0, 30.0, 120.0, 110.0], [200.0, 140.0, 260.0, 180.0]]),
                      scores=torch.tensor([0.9, 0.8]), labels=torch.tensor([0, 1]), masks=(disc, bar),
                      keypoints=kpts)


def _attach(buf: Gst.Buffer, _index: int) -> None:
    dets = _known()
    write_instances(buf, dets, write_detections(buf, dets, label_quarks(["person", "car"])))


def _rgb(buf: Gst.Buffer) -> np.ndarray:
    _, m = buf.map(Gst.MapFlags.READ)
    stride = len(m.data) // H
    out = np.frombuffer(m.data, np.uint8).reshape(H, stride)[:, : W * 3].reshape(H, W, 3).copy()
    buf.unmap(m)
    return out


def _inside(dets: Detections, row: int) -> np.ndarray:
    full = np.zeros((H, W), bool)
    x, y = dets.boxes_xyxy[row, :2].int().tolist()
    m = dets.masks[row].numpy() > 0
    full[y : y + m.shape[0], x : x + m.shape[1]] = m
    return full


def test_masks_and_keypoints_read_back_as_written() -> None:
    inject("rt", _attach)
    result = run_pipeline(SRC + " ! testinject name=rt ! identity name=out ! fakesink", {"out": read_detections})
    assert not result.errors, result.errors
    got, want = result.seen["out"][0].dets, _known()
    assert all(torch.equal(a, b) for a, b in zip(got.masks, want.masks)) and len(got.masks) == 2
    if keypoints_supported():
        assert torch.equal(got.keypoints, want.keypoints)
    else:  # GStreamer 1.26: no TensorMtd, the keypoints are left out (pyinfer warns once)
        assert got.keypoints is None


def test_stock_segmentationoverlay_draws_our_masks(tmp_path: Path) -> None:
    if Gst.ElementFactory.find("segmentationoverlay") is None:
        pytest.skip(f"no segmentationoverlay in {Gst.version_string()}: the element is new in 1.28")
    inject("seg", _attach)
    png = ARTIFACTS / "segmentationoverlay.png"
    png.parent.mkdir(exist_ok=True)
    result = run_pipeline(SRC + f" ! testinject name=seg ! segmentationoverlay ! videoconvert ! pngenc ! "
                                f"filesink location={png}")
    assert not result.errors, result.errors
    img = decode_frames(f"filesrc location={png} ! pngdec", 1)[0]
    changed = img.any(axis=2)
    dets = _known()
    drawn = np.zeros((H, W), bool)
    for row in range(2):
        # segmentationoverlay 1.28's resampling loop lags by one row: mask row r lands on frame row r + 1
        shifted = np.zeros((H, W), bool)
        shifted[1:] = _inside(dets, row)[:-1]
        assert changed[shifted].all(), f"mask {row} not drawn"
        drawn |= shifted
    assert not changed[~drawn].any()
    assert changed.sum() == drawn.sum() > 3000


def test_pyosd_blends_masks_and_draws_skeletons() -> None:
    inject("osd", _attach)
    result = run_pipeline(SRC + " ! testinject name=osd ! pyosd name=o mask-alpha=0.5 show-labels=false "
                                "line-width=1 ! fakesink", {"o": _rgb})
    assert not result.errors, result.errors
    img = result.seen["o"][0].astype(int)
    dets = _known()
    inside = _inside(dets, 0)
    inside[:, :22] = inside[:, 118:] = False  # keep clear of the box outline
    inside[:32] = inside[108:] = False
    colour = np.array(id_color(1000 + 0))
    assert np.abs(img[inside] - (colour * 0.5).round()).max() <= 1  # black frame: half the object's colour
    assert not _inside(dets, 0)[35, 25] and not img[35, 25].any()  # in the box, outside the disc: untouched
    if not keypoints_supported():
        pytest.skip(f"skeletons: {Gst.version_string()} has no GstAnalyticsTensorMtd (new in 1.28) to carry keypoints "
                    "(the masks were checked)")
    colour1 = np.array(id_color(1000 + 1))
    assert (img[150, 235] == colour1).all()  # on the shoulder-to-shoulder limb
    assert (img[200, 215] == colour1).all()  # the hip's dot


def test_pyosd_bad_skeleton_is_an_error_at_start() -> None:
    result = run_pipeline(SRC + " ! pyosd skeleton=nose-eye ! fakesink")
    assert result.errors and "skeleton" in result.errors[0]


@pytest.fixture(scope="module")
def seg_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ultralytics = pytest.importorskip("ultralytics")
    threads = torch.get_num_threads()
    try:
        model = ultralytics.YOLO("yolo11n-seg.yaml")
        randomise_yolo(model.model, 3)
        path = tmp_path_factory.mktemp("seg") / "yolo11n-seg.pt"
        model.save(path)
    finally:
        torch.set_num_threads(threads)
    return path


def test_pytracker_keeps_masks_with_their_boxes(seg_model: Path, vtest: Path) -> None:
    """pytracker adds TrackingMtds to the ODMtds pyinfer wrote: each tracked box keeps its SegmentationMtd."""
    before = pyinfer_frames(decode_frames(f"filesrc location={vtest} ! decodebin", 3), f"model={seg_model} "
                            "input-size=640x480 confidence-threshold=0.5")
    result = run_pipeline(f"filesrc location={vtest} ! decodebin ! videoconvert ! video/x-raw,format=RGB ! "
                          f"identity eos-after=4 ! pyinfer trust-checkpoint=true model={seg_model} input-size=640x480 "
                          "confidence-threshold=0.5 ! pytracker name=trk min-hits=1 ! fakesink",
                          {"trk": read_detections}, timeout_s=300)
    assert not result.errors, result.errors
    for frame, (meta, ref) in enumerate(zip(result.seen["trk"], before)):
        d = meta.dets
        assert d.masks is not None and d.track_ids is not None and len(ref["xyxy"]) > 0
        assert (d.track_ids >= 0).sum() >= 1, f"frame {frame}: nothing tracked"
        for i in range(len(d)):  # each row's mask is the one pyinfer wrote for that box
            j = int(np.argmin(np.abs(ref["xyxy"] - d.boxes_xyxy[i].numpy()).sum(1)))
            assert np.array_equal(ref["xyxy"][j], d.boxes_xyxy[i].numpy())
            x, y = d.boxes_xyxy[i, :2].int().tolist()
            placed = np.zeros((576, 768), bool)
            placed[y : y + d.masks[i].shape[0], x : x + d.masks[i].shape[1]] = d.masks[i].numpy() > 0
            assert np.array_equal(placed, ref["masks"][j])


def _decode_rle(size: list[int], counts: list[int]) -> np.ndarray:
    """COCO's uncompressed RLE decoded from its definition: alternating 0/1 runs, column-major."""
    h, w = size
    flat = np.repeat(np.arange(len(counts)) % 2, counts).astype(np.uint8)
    return flat.reshape(w, h).T


def test_pymsgconv_payloads_carry_masks_as_rle_and_keypoints() -> None:
    import json

    from inferstream.messaging.schema import validate
    from inferstream.meta.payload import read_payloads

    inject("msg", _attach)
    result = run_pipeline(SRC + " ! testinject name=msg ! pymsgconv name=conv schema=inferstream-frame "
                                "frame-interval=1 ! fakesink", {"conv": read_payloads})
    assert not result.errors, result.errors
    (doc,) = [json.loads(p) for p in result.seen["conv"][0][0].payloads]
    validate(doc, "inferstream-frame")
    want = _known()
    for obj, mask, kpts, box in zip(doc["objects"], want.masks, want.keypoints, want.boxes_xyxy):
        assert obj["mask"]["origin"] == box[:2].int().tolist() and obj["mask"]["size"] == list(mask.shape)
        assert np.array_equal(_decode_rle(obj["mask"]["size"], obj["mask"]["counts"]), mask.numpy())
        if keypoints_supported():
            assert np.allclose(obj["keypoints"], kpts.numpy(), atol=0.01)
        else:  # GStreamer 1.26: no TensorMtd, so no keypoints in the metadata nor in the payload
            assert "keypoints" not in obj
