"""The remote backend against real KServe v2 servers the tests start: Triton (PyTriton's tritonserver 2.51) and MLServer.

Both run the real person detector ONNX through onnxruntime (inside PyTriton's Python callable; in an MLServer
runtime), in ``.triton-venv`` (./setup makes it). The reference is the same file on the local onnxruntime backend: a remote
model must give pyinfer the same boxes, since the same decoder runs on the same raw outputs.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from gst_helpers import run_pipeline
from parity import decode_frames, pyinfer_frames
from servers.launch import ServerProcess, start_mlserver, start_pytriton, venv_python

from inferstream.backends.loader import load_backend
from inferstream.errors import BackendInitError, ConfigError, UnsupportedModelError

PYTHON = venv_python()
pytestmark = pytest.mark.skipif(PYTHON is None, reason="no .triton-venv: run ./setup (it makes the server venv)")
LABELS = "labels=Normal,Fall"  # PyTriton cannot put the file's labels into the model config; pyinfer gets them


@pytest.fixture(scope="session")
def triton(person_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    assert PYTHON is not None
    server = start_pytriton(PYTHON, person_onnx, "person", tmp_path_factory.mktemp("triton"), nhwc_twin=True)
    yield server
    server.close()


@pytest.fixture(scope="session")
def mlserver(person_onnx: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    assert PYTHON is not None
    if not (PYTHON.parent / "mlserver").is_file():
        pytest.skip("no MLServer in .triton-venv: ./setup installs it only where the system python is < 3.13 "
                    "(MLServer 1.7 requires it; Debian 13's is 3.13)")
    server = start_mlserver(PYTHON, person_onnx, "person", tmp_path_factory.mktemp("mlserver"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def local_boxes(frames: list[np.ndarray], person_onnx: Path) -> list[dict]:
    boxes = pyinfer_frames(frames, f"model={person_onnx} input-size=640")
    assert sum(len(f["xyxy"]) for f in boxes) >= 9  # real pedestrians, not an empty comparison
    assert {n for f in boxes for n in f["names"]} <= {"Normal", "Fall"}
    return boxes


@pytest.fixture(scope="module")
def frames(vtest: Path) -> list[np.ndarray]:
    got = decode_frames(f"filesrc location={vtest} ! decodebin", 160)
    return [got[0], got[80], got[159]]


def _same(ours: list[dict], ref: list[dict]) -> None:
    """Identical detections: the same onnxruntime ran on the same tensor, so nothing may differ at all."""
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        assert o["names"] == r["names"]
        np.testing.assert_array_equal(o["xyxy"], r["xyxy"])
        np.testing.assert_array_equal(o["conf"], r["conf"])


def test_triton_boxes_over_grpc_and_http_equal_the_local_onnx_backend(triton: ServerProcess,
                                                                       frames: list[np.ndarray],
                                                                       local_boxes: list[dict]) -> None:
    _same(pyinfer_frames(frames, f"model={triton.grpc_url} {LABELS}"), local_boxes)
    _same(pyinfer_frames(frames[:1], f"model={triton.http_url}?shm=off {LABELS}"), local_boxes[:1])


def test_mlserver_boxes_over_grpc_and_http_equal_the_local_onnx_backend(mlserver: ServerProcess,
                                                                         frames: list[np.ndarray],
                                                                         local_boxes: list[dict]) -> None:
    # MLServer has neither system shared memory nor Triton's binary tensors: gRPC bytes, HTTP JSON
    _same(pyinfer_frames(frames, f"model={mlserver.grpc_url} {LABELS}"), local_boxes)
    _same(pyinfer_frames(frames[:1], f"model={mlserver.http_url} {LABELS}"), local_boxes[:1])
    remote = load_backend(mlserver.http_url)
    try:
        assert remote.info.input_size == (640, 640) and remote.info.extra["server_version"] == "mlserver 1.7.1"
    finally:
        remote.close()


def test_metadata_from_the_server_and_batches_split_at_max_batch_size(triton: ServerProcess,
                                                                       person_onnx: Path) -> None:
    remote = load_backend(triton.grpc_url)
    try:
        assert remote.info.input_size == (640, 640)  # from the server's [-1, 3, 640, 640]
        assert remote.info.static_batch is None  # Triton batches (max_batch_size 8)
        assert remote.info.extra["output_names"] == "output0"
        x = torch.rand(9, 3, 640, 640, generator=torch.Generator().manual_seed(0))  # 9 > 8: two requests
        out = remote(x)
        assert remote._shm is not None  # loopback: the input went through registered system shared memory
    finally:
        remote.close()
    ref = load_backend(str(person_onnx))(x)
    assert [tuple(t.shape) for t in out] == [(9, 6, 8400)]
    torch.testing.assert_close(out[0], ref[0], rtol=0, atol=0)


def test_server_down_at_start_names_the_url() -> None:
    from ports import free_port

    url = f"grpc://127.0.0.1:{free_port()}/person"
    with pytest.raises(BackendInitError, match=f"cannot reach the inference server at {url}"):
        load_backend(url)
    desc = f"videotestsrc num-buffers=1 ! video/x-raw,width=64,height=48 ! pyinfer model={url} ! fakesink"
    result = run_pipeline(desc, timeout_s=30)
    assert len(result.errors) == 1 and url in result.errors[0] and "is it running" in result.errors[0]


def test_unknown_model_lists_what_the_server_has(triton: ServerProcess) -> None:
    with pytest.raises(BackendInitError, match=r"model 'nope' is not ready; it has models \['person', "
                                               r"'person_nhwc'\]"):
        load_backend(triton.grpc_url.replace("/person", "/nope"))


def test_a_model_whose_input_does_not_fit_names_both_shapes(triton: ServerProcess) -> None:
    with pytest.raises(UnsupportedModelError, match=r"offers input 'images' FP32 \[-1, 640, 640, 3\].*"
                                                    r"expected shape \[B, 3, H, W\]"):
        load_backend(triton.http_url + "_nhwc")
    # a size the server's model does not take: refused at start, both sizes named
    desc = (f"videotestsrc num-buffers=1 ! video/x-raw,width=64,height=48 ! pyinfer model={triton.grpc_url} "
            f"input-size=320 {LABELS} ! fakesink")
    result = run_pipeline(desc, timeout_s=60)
    assert len(result.errors) == 1 and "(320, 320)" in result.errors[0] and "(640, 640)" in result.errors[0]


def test_bad_urls_are_config_errors() -> None:
    for url, text in (("grpc://127.0.0.1:1/a/b/c", "expected grpc://"), ("http://u:p@h:1/m", "user:password"),
                      ("grpc://h:1/m?timeout=0", "timeout"), ("grpc://h:1/m?speed=9", "unknown option")):
        with pytest.raises(ConfigError, match=text):
            load_backend(url)
    with pytest.raises(ConfigError, match="backend=auto or backend=triton"):
        load_backend("grpc://h:1/m", backend="onnxruntime")


def test_server_gone_mid_run_is_an_element_error_after_bounded_retries(person_onnx: Path, tmp_path: Path) -> None:
    assert PYTHON is not None
    server = start_pytriton(PYTHON, person_onnx, "person", tmp_path)
    try:
        # through pyinfer: the server dies after the first frame; the stream ends in an element error naming the
        # server after the retries (run_pipeline raises TimeoutError on a hang)
        url = server.grpc_url + "?retries=2&timeout=5"
        desc = (f"videotestsrc num-buffers=20 ! video/x-raw,width=64,height=48 ! pyinfer name=inf model={url} "
                f"{LABELS} ! fakesink")
        result = run_pipeline(desc, {"inf": lambda _buf: server.close()}, timeout_s=60)
        assert result.seen["inf"], "no frame was inferred before the server went away"
        assert len(result.errors) == 1, result.errors
        assert server.grpc_url in result.errors[0] and "infer failed after 3 attempt(s)" in result.errors[0]
    finally:
        server.close()


def test_app_config_runs_a_remote_model(triton: ServerProcess, vtest: Path) -> None:
    from inferstream.app.api import run

    cfg = {"sources": [{"id": "cam0", "file": str(vtest), "max-frames": 2}],
           "infer": {"model": triton.grpc_url + "?timeout=20", "labels": "Normal,Fall"}}
    result = run(cfg)
    assert result.exit_code == 0 and not result.errors, result.errors
    assert result.frames == {"cam0": 2}
