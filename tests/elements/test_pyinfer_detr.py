"""pyinfer's DETR-family boxes equal the families' own predict on the same weights, frames and thresholds.

RF-DETR Nano (rfdetr, seeded random weights: none ship offline) as its torch network (a ``path.py:factory`` spec) and
as rfdetr's own ONNX export, against ``RFDETRNano.predict``; ultralytics' RT-DETR-l (seeded random weights) against
``RTDETR.predict``. Frames: vtest.avi and bus.jpg, both resized by stretching, as these families do. Thresholds sit
in a gap of the reference's own score distribution (random weights score in a narrow band).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from detr_models import rfdetr_reference
from parity import assert_same_boxes, decode_frames, gap_threshold, pyinfer_frames

DETR_MODELS = Path(__file__).resolve().parents[1] / "detr_models.py"


@pytest.fixture(scope="module")
def frames(vtest: Path) -> list[np.ndarray]:
    import ultralytics

    video = decode_frames(f"filesrc location={vtest} ! decodebin", 160)
    bus = Path(ultralytics.__file__).parent / "assets" / "bus.jpg"
    return [video[0], video[159], decode_frames(f"filesrc location={bus} ! jpegdec", 1)[0]]


def _rfdetr_predict(frames: list[np.ndarray], threshold: float) -> list[dict]:
    model, out = rfdetr_reference(), []
    for f in frames:
        d = model.predict(f, threshold=threshold)  # RGB uint8, as the pipeline's frames
        out.append({"xyxy": d.xyxy.round(), "conf": d.confidence, "r": np.zeros(len(d)),
                    "names": [f"class{c}" for c in d.class_id]})
    return out


@pytest.fixture(scope="module")
def rfdetr_threshold(frames: list[np.ndarray]) -> float:
    return gap_threshold(np.concatenate([r["conf"] for r in _rfdetr_predict(frames, 0.0)]), len(frames))


@pytest.fixture(scope="module")
def rfdetr_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rfdetr's own ONNX export of the reference (outputs ``dets`` (1, 300, 4), ``labels`` (1, 300, 91))."""
    out = tmp_path_factory.mktemp("rfdetr")
    threads = torch.get_num_threads()
    rfdetr_reference().export(output_dir=str(out))
    torch.set_num_threads(threads)
    return out / "rfdetr-nano.onnx"


@pytest.mark.parametrize("kind", ["torch", "onnx"])
def test_rfdetr_matches_its_predict(kind: str, frames: list[np.ndarray], rfdetr_threshold: float,
                                    request: pytest.FixtureRequest) -> None:
    model = f"{DETR_MODELS}:rfdetr_nano input-size=384" if kind == "torch" else request.getfixturevalue("rfdetr_onnx")
    ours = pyinfer_frames(frames, f"model={model} confidence-threshold={rfdetr_threshold}")
    ref = _rfdetr_predict(frames, rfdetr_threshold)
    assert all(len(r["conf"]) >= 5 for r in ref)  # every frame compares boxes, not an empty list
    assert_same_boxes(ours, ref)
    for o, r in zip(ours, ref):  # the same scores, not only within the helper's tolerance
        assert np.abs(np.sort(o["conf"]) - np.sort(r["conf"])).max() < 1e-4


@pytest.fixture(scope="module")
def rtdetr_pt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RT-DETR-l from ultralytics' yaml with seeded variance-preserving weights (its own init scores every query
    alike), saved as a checkpoint."""
    from ultralytics import RTDETR

    threads = torch.get_num_threads()
    model = RTDETR("rtdetr-l.yaml")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for mod in model.model.modules():
            if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) / math.sqrt(mod.weight[0].numel()))
                if mod.bias is not None:
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.5)
    path = tmp_path_factory.mktemp("rtdetr") / "rtdetr-l.pt"
    model.save(path)
    torch.set_num_threads(threads)
    return path


def _rtdetr_predict(model: Path, frames: list[np.ndarray], conf: float) -> list[dict]:
    from ultralytics import RTDETR

    threads = torch.get_num_threads()
    results = RTDETR(str(model)).predict([f[:, :, ::-1] for f in frames], conf=conf, imgsz=320, verbose=False)
    torch.set_num_threads(threads)
    out = []
    for f, r in zip(frames, results):
        # ultralytics leaves RT-DETR boxes unclipped; pyinfer clips every family's boxes to the frame
        h, w = f.shape[:2]
        xyxy = r.boxes.xyxy.numpy().clip(0, [w, h, w, h]).round()
        out.append({"xyxy": xyxy, "conf": r.boxes.conf.numpy(), "r": np.zeros(len(xyxy)),
                    "names": [r.names[int(c)] for c in r.boxes.cls]})
    return out


def test_rtdetr_matches_ultralytics_predict(frames: list[np.ndarray], rtdetr_pt: Path) -> None:
    scores = np.concatenate([r["conf"] for r in _rtdetr_predict(rtdetr_pt, frames, 0.0)])
    conf = gap_threshold(scores, len(frames))
    ours = pyinfer_frames(frames, f"model={rtdetr_pt} input-size=320 confidence-threshold={conf}")
    ref = _rtdetr_predict(rtdetr_pt, frames, conf)
    assert all(len(r["conf"]) >= 5 for r in ref)
    assert_same_boxes(ours, ref)


def test_dfine_from_transformers_matches_its_post_processing(vtest: Path) -> None:
    """D-FINE through transformers: its image processor rescales without normalising, so pyinfer is told the same
    (``mean``/``std``); 320x320 crops make the resize the identity, as the processor's and ours differ in filter."""
    from detr_models import dfine_reference
    from transformers import RTDetrImageProcessor

    crops = [f[100:420, 200:520].copy() for f in decode_frames(f"filesrc location={vtest} ! decodebin", 2)]
    processor = RTDetrImageProcessor(size={"height": 320, "width": 320})
    with torch.no_grad():
        out = dfine_reference()(**processor(images=crops, return_tensors="pt"))
    everything = processor.post_process_object_detection(out, threshold=0.0, target_sizes=[(320, 320)] * 2)
    conf = gap_threshold(np.concatenate([r["scores"].numpy() for r in everything]), len(crops))
    ref = [{"xyxy": r["boxes"].numpy().round(), "conf": r["scores"].numpy(), "r": np.zeros(len(r["scores"])),
            "names": [f"class{c}" for c in r["labels"].tolist()]}
           for r in processor.post_process_object_detection(out, threshold=conf, target_sizes=[(320, 320)] * 2)]
    ours = pyinfer_frames(crops, f"model={DETR_MODELS}:dfine input-size=320 model-family=detr mean=0 std=1 "
                                 f"confidence-threshold={conf}")
    assert all(len(r["conf"]) >= 5 for r in ref)
    assert_same_boxes(ours, ref)
