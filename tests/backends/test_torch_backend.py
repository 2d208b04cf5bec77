"""torch backend: TorchScript, pickled checkpoints (ultralytics), factories; outputs shaped like the ONNX export."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from inferstream.backends.base import ModelInfo
from inferstream.backends.loader import load_backend
from inferstream.backends.torch_backend import TorchBackend, preferred_memory_format
from inferstream.errors import BackendInitError, ConfigError, ModelNotFoundError, UnsupportedModelError

from .conftest import IMGSZ, YoloFiles

USER_MODELS = Path(__file__).with_name("user_models.py")
# (config, task, end2end, output shape for B=2 at IMGSZ=256: 1344 anchors)
EXPECTED = [
    ("yolo11n", "detect", False, (2, 84, 1344)),
    ("yolo26n", "detect", True, (2, 300, 6)),
    ("yolo11n-obb", "obb", False, (2, 85, 1344)),
]


def _batch(b: int = 2, size: int = IMGSZ, seed: int = 0) -> torch.Tensor:
    return torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(seed))


def assert_same_detections(a: torch.Tensor, b: torch.Tensor, atol: float, score_tol: float = 1e-5) -> None:
    """Compare end-to-end outputs ``(B, K, 6)`` allowing for top-k ties.

    Rows whose scores differ by less than the runtimes' rounding may come out in either order, and at the top-k
    cut-off one runtime may keep a row the other drops for an equal-scoring one; so scores are compared in order,
    and every row scoring clearly above the cut-off must have a twin (box, score, class) in the other output.
    """
    assert a.shape == b.shape
    torch.testing.assert_close(a[..., 4], b[..., 4], atol=score_tol, rtol=0)
    for x, y in zip(a, b):
        inner = x[:, 4] > y[:, 4].min() + score_tol
        nearest = torch.cdist(x[inner], y, compute_mode="donot_use_mm_for_euclid_dist").amin(dim=1)  # exact
        assert inner.sum() > len(x) // 2 and nearest.max().item() < atol, f"unmatched row, {nearest.max().item()}"


@pytest.mark.parametrize(("name", "task", "end2end", "shape"), EXPECTED)
def test_torch_backend_checkpoint_matches_onnx_and_torchscript(
    yolo_files: dict[str, YoloFiles], name: str, task: str, end2end: bool, shape: tuple[int, ...]
) -> None:
    files = yolo_files[name]
    pt = load_backend(str(files.pt), trust_checkpoint=True)
    onnx = load_backend(str(files.onnx))
    ts = load_backend(str(files.torchscript))
    x = _batch()
    (out_pt,), (out_onnx,), (out_ts,) = pt(x), onnx(x), ts(x)
    assert out_pt.shape == out_onnx.shape == out_ts.shape == shape
    if end2end:
        assert_same_detections(out_pt, out_onnx, atol=1e-2)
        assert_same_detections(out_pt, out_ts, atol=1e-4)
    else:  # boxes in input pixels (0..256), class scores in 0..1
        torch.testing.assert_close(out_pt, out_onnx, atol=1e-3, rtol=1e-4)
        torch.testing.assert_close(out_pt, out_ts, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize(("name", "task", "end2end", "shape"), EXPECTED)
def test_torch_backend_model_info_from_checkpoint_and_torchscript(
    yolo_files: dict[str, YoloFiles], name: str, task: str, end2end: bool, shape: tuple[int, ...]
) -> None:
    files = yolo_files[name]
    pt = load_backend(str(files.pt), trust_checkpoint=True)
    ts = load_backend(str(files.torchscript))
    for info in (pt.info, ts.info):
        assert info.task == task
        assert info.end2end is end2end
        assert info.names is not None and len(info.names) == 80 and info.names[0] == "0"  # yaml builds: ids
        assert info.extra["stride"] == "32"
    assert pt.info.input_size is None  # eager heads take any size...
    assert pt.info.extra["imgsz"] == "[640, 640]"  # ...and the trained size (ultralytics' default) is kept
    assert ts.info.input_size == (IMGSZ, IMGSZ)  # a trace bakes its size


def test_torch_backend_checkpoint_runs_other_input_sizes(yolo_files: dict[str, YoloFiles]) -> None:
    backend = load_backend(str(yolo_files["yolo11n"].pt), trust_checkpoint=True)
    (out,) = backend(_batch(b=1, size=320))
    assert out.shape == (1, 84, 2100)


def test_torch_backend_untrusted_checkpoint_raises_config_error(yolo_files: dict[str, YoloFiles]) -> None:
    with pytest.raises(ConfigError, match=r"trust-checkpoint=true") as exc:
        load_backend(str(yolo_files["yolo11n"].pt))
    text = str(exc.value)
    assert "yolo11n.pt" in text and "ultralytics." in text  # names the file and the classes it needs
    assert "ONNX" in text  # and the safe alternative


def test_torch_backend_text_file_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "notes.pt"
    path.write_text("these are not weights\n" * 20)
    with pytest.raises(UnsupportedModelError, match=r"notes\.pt.*tried TorchScript and torch\.load"):
        load_backend(str(path), trust_checkpoint=True)


def test_torch_backend_random_bytes_pt_names_trust_checkpoint_not_torch_advice(tmp_path: Path) -> None:
    path = tmp_path / "random.pt"  # random bytes starting with a pickle opcode torch's weights-only loader refuses
    path.write_bytes(b"T" + torch.randint(0, 256, (4095,), generator=torch.Generator().manual_seed(3),
                                          dtype=torch.uint8).numpy().tobytes())
    with pytest.raises(UnsupportedModelError, match=r"random\.pt is not a PyTorch model file") as info:
        load_backend(str(path))
    assert "trust-checkpoint=true" in str(info.value) and "weights_only` set to `False" not in str(info.value)


def test_torch_backend_random_torchscript_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "model.torchscript"
    path.write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8).numpy().tobytes())
    with pytest.raises(UnsupportedModelError, match=r"model\.torchscript.*torch\.jit\.load"):
        load_backend(str(path))


def test_torch_backend_state_dict_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "weights.pth"
    torch.save(torch.nn.Conv2d(3, 4, 1).state_dict(), path)
    with pytest.raises(UnsupportedModelError, match=r"state_dict.*package\.module:function"):
        load_backend(str(path))


def test_torch_backend_trusted_pickle_missing_package_raises_backend_init(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "gone_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import torch
        class Net(torch.nn.Module):
            def forward(self, x):
                return x
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import gone_pkg  # type: ignore[import-not-found]

    path = tmp_path / "net.pt"
    torch.save(gone_pkg.Net(), path)
    monkeypatch.delitem(sys.modules, "gone_pkg")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    with pytest.raises(BackendInitError, match=r"net\.pt needs the Python package\(s\) gone_pkg"):
        load_backend(str(path), trust_checkpoint=True)


def test_torch_backend_checkpoint_without_ultralytics_says_which_extra(yolo_files: dict[str, YoloFiles],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import inferstream.backends.torch_module as tb

    real = tb.importlib.util.find_spec
    monkeypatch.setattr(tb.importlib.util, "find_spec", lambda name, *a: None if name == "ultralytics" else real(name))
    with pytest.raises(BackendInitError, match=r"package\(s\) ultralytics.*inferstream\[ultralytics\]"):
        load_backend(str(yolo_files["yolo11n"].pt), trust_checkpoint=True)


def test_torch_backend_trusted_whole_module_pickle_loads(tmp_path: Path) -> None:
    path = tmp_path / "whole.pt"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 2, 1)), path)
    with pytest.raises(ConfigError):
        load_backend(str(path))
    backend = load_backend(str(path), trust_checkpoint=True)
    (out,) = backend(_batch(b=1, size=32))
    assert out.shape == (1, 2, 32, 32) and backend.info.names is None


@pytest.mark.parametrize("spec", [f"{USER_MODELS}:tiny_detector", "user_models:tiny_detector"])
def test_torch_backend_factory_spec_runs_user_module(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_MODELS.parent))
    backend = load_backend(spec)
    assert isinstance(backend, TorchBackend)
    assert backend.info.names == ("cat", "dog")
    assert backend.info.input_size is None and backend.info.extra["imgsz"] == "[64, 96]"
    assert backend.info.task == "detect" and backend.info.end2end is False
    outs = backend(_batch(b=2, size=64))
    assert [tuple(o.shape) for o in outs] == [(2, 6, 64), (2, 6)]


def test_torch_backend_factory_plain_callable(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = load_backend(f"{USER_MODELS}:plain_callable")
    (out,) = backend(_batch(b=3, size=16))
    assert out.shape == (3, 3) and backend.info.names is None


def test_torch_backend_fp16_precision_casts_model_and_input() -> None:
    backend = load_backend(f"{USER_MODELS}:tiny_detector", precision="fp16")
    assert backend.dtype == torch.float16
    out, _ = backend(_batch(b=1, size=64))  # fp32 batch in: cast by the backend
    assert out.dtype == torch.float16


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        ("nosuchmod:fn", ModelNotFoundError, r"no module named 'nosuchmod'"),
        ("os:nosuchfn", ModelNotFoundError, r"os has no attribute 'nosuchfn'"),
        (f"{USER_MODELS.with_name('absent.py')}:fn", ModelNotFoundError, r"factory file not found"),
        (f"{USER_MODELS}:NOT_A_FUNCTION", ConfigError, r"not a callable"),
        (f"{USER_MODELS}:broken_factory", BackendInitError, r"raised RuntimeError: weights file missing"),
        (f"{USER_MODELS}:returns_number", UnsupportedModelError, r"returned int"),
    ],
)
def test_torch_backend_bad_factory_spec_raises(spec: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        load_backend(spec)


def test_torch_backend_close_then_call_raises() -> None:
    backend = load_backend(f"{USER_MODELS}:tiny_detector")
    backend.warmup(1, (64, 64))
    backend.close()
    with pytest.raises(BackendInitError, match="closed"):
        backend(_batch(b=1, size=64))


def _ultralytics_nchw(pt: Path) -> torch.nn.Module:
    """ultralytics' own network from the checkpoint, fused, in eval mode and NCHW (the reference layout)."""
    from ultralytics import YOLO

    threads = torch.get_num_threads()
    model = YOLO(str(pt)).model.float().fuse(verbose=False).eval().to(memory_format=torch.contiguous_format)
    torch.set_num_threads(threads)
    return model


@pytest.mark.skipif(preferred_memory_format(torch.nn.Conv2d(3, 8, 3), torch.device("cpu")) != torch.channels_last,
                    reason="channels_last is used on x86 CPUs with oneDNN only")
def test_torch_backend_cpu_module_runs_channels_last_as_ultralytics_nchw(yolo_files: dict[str, YoloFiles],
                                                                          person_models: Path) -> None:
    for pt, x in ((yolo_files["yolo11n"].pt, _batch(b=2)), (person_models / "best.pt", _batch(b=1, size=320))):
        backend = load_backend(str(pt), trust_checkpoint=True)
        assert backend.memory_format == torch.channels_last
        (ours,) = backend(x)
        with torch.inference_mode():
            ref = _ultralytics_nchw(pt)(x.contiguous())[0]
        assert ours.shape == ref.shape
        torch.testing.assert_close(ours, ref, atol=5e-4, rtol=1e-4)  # boxes in input pixels, scores in 0..1


def test_torch_backend_memory_format_rule_puts_conv_nets_on_cuda_in_nhwc_and_keeps_callables_nchw() -> None:
    conv = torch.nn.Conv2d(3, 4, 3)
    assert preferred_memory_format(conv, torch.device("cuda")) == torch.channels_last  # cuDNN's tensor-core layout
    assert preferred_memory_format(lambda x: x, torch.device("cpu")) == torch.contiguous_format  # nothing to convert
    backend = TorchBackend(conv, ModelInfo(), torch.device("cpu"), torch.float32)
    expected = torch.channels_last if preferred_memory_format(conv, torch.device("cpu")) == torch.channels_last \
        else torch.contiguous_format
    assert backend.memory_format == expected and conv.weight.is_contiguous(memory_format=expected)
    x = _batch(b=1, size=16)
    torch.testing.assert_close(backend(x)[0], torch.nn.functional.conv2d(x, conv.weight, conv.bias))


def test_modules_that_are_not_mostly_convolutions_stay_nchw() -> None:
    """A transformer (RF-DETR's ViT: a patch conv, then linear layers) gains nothing from channels_last."""
    vit_like = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 16, stride=16), torch.nn.Flatten(2),
                                   torch.nn.Linear(4, 512), torch.nn.Linear(512, 512))
    cpu = torch.device("cpu")
    assert preferred_memory_format(vit_like, cpu) == torch.contiguous_format
    assert preferred_memory_format(torch.nn.Identity(), cpu) == torch.contiguous_format  # no weights at all
