"""load_backend: runtime choice, option checks, errors, and the metadata helpers both runtimes share."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from inferstream.backends.loader import info_from_export_metadata, load_backend, names_tuple, size_hw
from inferstream.backends.onnxrt import OnnxRuntimeBackend
from inferstream.backends.torch_backend import TorchBackend
from inferstream.errors import ConfigError, ModelNotFoundError, UnsupportedModelError

from .conftest import YoloFiles

USER_MODELS = Path(__file__).with_name("user_models.py")


def test_load_backend_person_detector_pt_and_onnx_agree(person_models: Path, bus_batch: torch.Tensor) -> None:
    """The real YOLOv8s person model, checkpoint vs its own ONNX export, on a real photo (bus.jpg)."""
    pt = load_backend(str(person_models / "best.pt"), trust_checkpoint=True)
    ox = load_backend(str(person_models / "best_fp16.onnx"))
    assert pt.info.names == ox.info.names == ("Normal", "Fall")
    assert pt.info.extra["imgsz"] == ox.info.extra["imgsz"] == "[640, 640]"
    assert (pt.info.input_size, ox.info.input_size) == (None, (640, 640))  # eager: any size; graph: fixed
    (a,), (b,) = pt(bus_batch), ox(bus_batch)
    assert a.shape == b.shape == (1, 6, 8400)
    torch.testing.assert_close(a[:, :4], b[:, :4], atol=2e-2, rtol=1e-4)  # box centres/sizes in pixels
    torch.testing.assert_close(a[:, 4:], b[:, 4:], atol=1e-4, rtol=1e-4)  # class scores
    people = (a[0, 4:].amax(0) > 0.5).sum().item()
    assert people >= 3  # anchors on the bus's passengers: RGB order and scaling are right


@pytest.mark.parametrize(("suffix", "cls"), [(".onnx", OnnxRuntimeBackend), (".pt", TorchBackend)])
def test_load_backend_picks_runtime_by_suffix(yolo_files: dict[str, YoloFiles], suffix: str, cls: type) -> None:
    files = yolo_files["yolo11n"]
    path = files.onnx if suffix == ".onnx" else files.pt
    assert isinstance(load_backend(str(path), trust_checkpoint=True), cls)


def test_load_backend_forced_backend_ignores_suffix(yolo_files: dict[str, YoloFiles], tmp_path: Path) -> None:
    odd = tmp_path / "model.bin"
    shutil.copy(yolo_files["yolo11n"].onnx, odd)
    with pytest.raises(UnsupportedModelError, match=r"no backend for suffix '\.bin'.*\.onnx, \.pt"):
        load_backend(str(odd))
    assert isinstance(load_backend(str(odd), backend="onnxruntime"), OnnxRuntimeBackend)


def test_load_backend_missing_path_raises_model_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "model.onnx"
    with pytest.raises(ModelNotFoundError, match=rf"not found: {missing}"):
        load_backend(str(missing))


def test_load_backend_directory_raises_model_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="is a directory"):
        load_backend(str(tmp_path))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "tensorrt"}, r"backend='tensorrt' is not one of auto, torch, onnxruntime"),
        ({"precision": "int8"}, r"precision='int8' is not one of auto, fp32, fp16"),
        ({"device": "tpu"}, r"device='tpu'"),
        ({"device": "meta"}, r"only cpu and cuda"),
    ],
)
def test_load_backend_bad_option_raises_config_error(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_backend(f"{USER_MODELS}:tiny_detector", **kwargs)  # type: ignore[arg-type]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_load_backend_cuda_without_gpu_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        load_backend(f"{USER_MODELS}:tiny_detector", device="cuda")


def test_load_backend_factory_refuses_onnxruntime() -> None:
    with pytest.raises(ConfigError, match="only the torch backend"):
        load_backend(f"{USER_MODELS}:tiny_detector", backend="onnxruntime")


def test_load_backend_auto_precision_is_fp32_on_cpu() -> None:
    assert load_backend(f"{USER_MODELS}:tiny_detector").dtype == torch.float32


def test_load_backend_imports_runtimes_lazily() -> None:
    """Loading a torch factory model imports neither onnxruntime nor ultralytics, and backends/ never imports gi."""
    code = (
        "import sys, inferstream.backends.loader as l, inferstream.backends.torch_backend, "
        "inferstream.backends.onnxrt\n"
        f"l.load_backend({str(USER_MODELS)!r} + ':tiny_detector')\n"
        "print(sorted(m for m in ('onnxruntime', 'ultralytics', 'gi') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ({0: "a", 1: "b"}, ("a", "b")),
        ({"0": "a", "1": "b"}, ("a", "b")),  # JSON (TorchScript config.txt) keys are strings
        (["a", "b"], ("a", "b")),
        ({1: "b"}, ("0", "b")),
        ({"x": "a"}, None),
        ({-1: "a"}, None),
        ("a,b", None),
        (None, None),
    ],
)
def test_names_tuple_orders_by_class_id(names: object, expected: tuple[str, ...] | None) -> None:
    assert names_tuple(names) == expected


@pytest.mark.parametrize(("imgsz", "expected"), [(640, (640, 640)), ([480, 640], (480, 640)), ((1, 2), (1, 2)),
                                                 (True, None), ([0, 640], None), ("640", None), ([1, 2, 3], None)])
def test_size_hw_accepts_int_or_pair(imgsz: object, expected: tuple[int, int] | None) -> None:
    assert size_hw(imgsz) == expected


def test_info_from_export_metadata_graph_size_wins() -> None:
    info = info_from_export_metadata({"imgsz": [640, 640], "stride": 32, "task": "obb"}, input_size=(320, 320),
                                     static_batch=4)
    assert (info.input_size, info.static_batch, info.task, info.extra["stride"]) == ((320, 320), 4, "obb", "32")


@pytest.mark.parametrize(("fixed", "expected"), [(True, (480, 640)), (False, None)])
def test_info_from_export_metadata_imgsz_binds_only_when_fixed(fixed: bool, expected: tuple[int, int] | None) -> None:
    info = info_from_export_metadata({"imgsz": [480, 640]}, export_size_is_fixed=fixed)
    assert info.input_size == expected and info.extra["imgsz"] == "[480, 640]"
