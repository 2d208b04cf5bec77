"""onnxruntime backend: ModelInfo from graph and metadata, dtype, static batches, errors."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inferstream.backends.loader import load_backend
from inferstream.backends.onnxrt import OnnxRuntimeBackend
from inferstream.errors import ConfigError, UnsupportedModelError

from .conftest import IMGSZ, YoloFiles

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

CUDA = torch.cuda.is_available()


def tiny_onnx(path: Path, *, dtype: int = TensorProto.FLOAT, shape: list[int | str] | None = None,
              metadata: dict[str, str] | None = None, inputs: int = 1) -> Path:
    """An Identity graph ``images -> output0`` (one more input when ``inputs=2``), with metadata props."""
    shape = shape if shape is not None else ["batch", 3, 8, 8]
    ins = [helper.make_tensor_value_info(f"images{i or ''}", dtype, shape) for i in range(inputs)]
    out = helper.make_tensor_value_info("output0", dtype, shape)
    graph = helper.make_graph([helper.make_node("Identity", ["images"], ["output0"])], "tiny", ins, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        prop = model.metadata_props.add()
        prop.key, prop.value = key, value
    onnx.save(model, path)
    return path


def _batch(b: int, size: int = IMGSZ) -> torch.Tensor:
    return torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(b))


def test_onnxrt_person_detector_info_from_graph_and_metadata(person_models: Path) -> None:
    backend = load_backend(str(person_models / "best_fp16.onnx"))
    assert isinstance(backend, OnnxRuntimeBackend)
    info = backend.info
    assert info.names == ("Normal", "Fall")
    assert (info.task, info.end2end, info.input_size, info.static_batch) == ("detect", False, (640, 640), 1)
    assert backend.dtype == torch.float32  # named fp16, but the graph takes float: the graph decides
    assert info.extra["output_names"] == "output0" and info.extra["stride"] == "32"


def test_onnxrt_static_batch_one_runs_each_frame(static_batch_onnx: Path) -> None:
    backend = load_backend(str(static_batch_onnx))
    assert backend.info.static_batch == 1 and backend.info.input_size == (IMGSZ, IMGSZ)
    x = _batch(3)
    (out,) = backend(x)
    assert out.shape == (3, 84, 1344)
    singles = torch.cat([backend(x[i:i + 1])[0] for i in range(3)])
    torch.testing.assert_close(out, singles, atol=0, rtol=0)


def test_onnxrt_dynamic_export_takes_any_batch_and_size(yolo_files: dict[str, YoloFiles]) -> None:
    backend = load_backend(str(yolo_files["yolo11n"].onnx))
    assert backend.info.static_batch is None and backend.info.input_size is None
    assert backend.info.extra["imgsz"] == f"[{IMGSZ}, {IMGSZ}]"  # the export size, a default, not a constraint
    (out,) = backend(_batch(2, size=320))
    assert out.shape == (2, 84, 2100)


def test_onnxrt_static_batch_pads_last_chunk(tmp_path: Path) -> None:
    backend = load_backend(str(tiny_onnx(tmp_path / "b2.onnx", shape=[2, 3, 8, 8])))
    x = _batch(3, size=8)
    (out,) = backend(x)
    torch.testing.assert_close(out, x, atol=0, rtol=0)


def test_onnxrt_static_size_mismatch_raises_config_error(static_batch_onnx: Path) -> None:
    backend = load_backend(str(static_batch_onnx))
    with pytest.raises(ConfigError, match=rf"takes {IMGSZ}x{IMGSZ} input, got 320x320"):
        backend(_batch(1, size=320))


def test_onnxrt_fp16_graph_casts_input(tmp_path: Path) -> None:
    backend = load_backend(str(tiny_onnx(tmp_path / "half.onnx", dtype=TensorProto.FLOAT16)))
    assert backend.dtype == torch.float16
    x = _batch(2, size=8)
    (out,) = backend(x)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, x.half(), atol=0, rtol=0)


@pytest.mark.parametrize(("graph_dtype", "precision"), [(TensorProto.FLOAT16, "fp32"), (TensorProto.FLOAT, "fp16")])
def test_onnxrt_precision_contradicting_graph_raises_config_error(tmp_path: Path, graph_dtype: int,
                                                                   precision: str) -> None:
    path = tiny_onnx(tmp_path / "m.onnx", dtype=graph_dtype)
    with pytest.raises(ConfigError, match=rf"precision={precision} but m\.onnx takes"):
        load_backend(str(path), precision=precision)


@pytest.mark.parametrize(
    ("metadata", "names", "end2end", "task"),
    [
        ({"names": "{0: 'a', 1: 'b'}", "end2end": "True", "task": "detect"}, ("a", "b"), True, "detect"),
        ({"names": "['x', 'y', 'z']", "args": "{'nms': True}"}, ("x", "y", "z"), True, None),
        ({"names": "{0: 'a', 2: 'c'}", "args": "{'nms': False}"}, ("a", "1", "c"), False, None),
        ({"names": "__import__('os').getcwd()", "end2end": "exit()"}, None, None, None),  # parsed, never run
        ({}, None, None, None),
    ],
)
def test_onnxrt_metadata_parsed_as_literals(tmp_path: Path, metadata: dict[str, str],
                                            names: tuple[str, ...] | None, end2end: bool | None,
                                            task: str | None) -> None:
    info = load_backend(str(tiny_onnx(tmp_path / "meta.onnx", metadata=metadata))).info
    assert (info.names, info.end2end, info.task) == (names, end2end, task)


def test_onnxrt_dynamic_graph_has_no_input_size_but_keeps_imgsz(tmp_path: Path) -> None:
    path = tiny_onnx(tmp_path / "dyn.onnx", shape=["batch", 3, "h", "w"], metadata={"imgsz": "[480, 640]"})
    info = load_backend(str(path)).info
    assert (info.input_size, info.static_batch, info.extra["imgsz"]) == (None, None, "[480, 640]")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"inputs": 2}, r"takes 2 inputs \(images, images1\)"),
        ({"shape": [1, 8, 8, 3]}, r"expected NCHW with 3 channels"),
        ({"dtype": TensorProto.UINT8}, r"is tensor\(uint8\)"),
    ],
)
def test_onnxrt_unsupported_input_raises(tmp_path: Path, kwargs: dict[str, object], match: str) -> None:
    path = tiny_onnx(tmp_path / "odd.onnx", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(UnsupportedModelError, match=match):
        load_backend(str(path))


@pytest.mark.parametrize("kind", ["random", "truncated", "text"])
def test_onnxrt_file_that_is_not_a_model_is_unsupported(tmp_path: Path, yolo_files: dict[str, YoloFiles],
                                                        kind: str) -> None:
    path = tmp_path / f"{kind}.onnx"
    if kind == "random":
        path.write_bytes(torch.randint(0, 256, (10_000,), dtype=torch.uint8).numpy().tobytes())
    elif kind == "truncated":
        path.write_bytes(yolo_files["yolo11n"].onnx.read_bytes()[:1_000_000])
    else:
        path.write_text("not a model\n")
    with pytest.raises(UnsupportedModelError, match=rf"{kind}\.onnx is not an ONNX model.*tried onnxruntime"):
        load_backend(str(path))


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_onnxrt_cuda_matches_cpu(yolo_files: dict[str, YoloFiles]) -> None:
    cpu = load_backend(str(yolo_files["yolo11n"].onnx))
    gpu = load_backend(str(yolo_files["yolo11n"].onnx), device="cuda")
    x = _batch(2)
    (out_gpu,) = gpu(x.cuda())
    assert out_gpu.device.type == "cuda"
    torch.testing.assert_close(out_gpu.cpu(), cpu(x)[0], atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize(("given", "threads"), [("3", 3), ("", None), ("0", None), ("x", None)])
def test_onnxrt_session_threads_follow_omp_num_threads(monkeypatch: pytest.MonkeyPatch, person_onnx: Path,
                                                        given: str, threads: int | None) -> None:
    """The app gives each CPU worker its share of the cores in OMP_NUM_THREADS; ONNX Runtime takes it as torch
    does. Unset or not a positive number: every CPU this process may use."""
    import os

    monkeypatch.setenv("OMP_NUM_THREADS", given)
    backend = load_backend(str(person_onnx))
    assert isinstance(backend, OnnxRuntimeBackend)
    assert backend._session is not None
    options = backend._session.get_session_options()
    assert options.intra_op_num_threads == (threads or len(os.sched_getaffinity(0)))
