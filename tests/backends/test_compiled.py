"""graph=inductor: the torch backend's forward compiled by torch.compile (a TorchScript archive converted to an
exported program first) gives the archive's own outputs at every batch size, compiled before the first frame."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inferstream.backends.loader import load_backend
from inferstream.errors import BackendInitError, ConfigError

from .conftest import IMGSZ, YoloFiles


def _compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def test_inductor_torchscript_gives_the_archives_outputs_at_every_batch_size_without_compiling_mid_stream(
        yolo_files: dict[str, YoloFiles]) -> None:
    path = str(yolo_files["yolo11n"].torchscript)
    plain = load_backend(path, graph="off")
    compiled = load_backend(path, graph="inductor")
    compiled.warmup(4, (IMGSZ, IMGSZ))
    assert compiled.graph_status.startswith("inductor")
    graphs = _compiled_graphs()
    assert graphs > 0, "dynamo compiled nothing: the counter below would prove nothing"
    for b in (3, 1, 4, 2):  # the batch sizes a stream's partial batches bring, in no particular order
        x = torch.rand(b, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(b))
        (expected,), (got,) = plain(x), compiled(x)
        assert got.shape == expected.shape == (b, 84, 1344)
        # boxes in input pixels (0..256), class scores in 0..1: fused kernels round differently, nothing more
        torch.testing.assert_close(got[:, :4], expected[:, :4], atol=2e-3, rtol=1e-4)
        torch.testing.assert_close(got[:, 4:], expected[:, 4:], atol=1e-4, rtol=1e-4)
    assert _compiled_graphs() == graphs, "a batch size compiled again after warm-up"


def test_inductor_is_refused_for_an_onnx_model(yolo_files: dict[str, YoloFiles]) -> None:
    with pytest.raises(ConfigError, match="graph=inductor needs the torch backend"):
        load_backend(str(yolo_files["yolo11n"].onnx), graph="inductor")


class _DataDependentModel(torch.nn.Module):
    """Runs eagerly, but its output's size depends on the values: nothing a compiler can trace ahead."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool(x.sum() > 1e9):
            raise RuntimeError("unreachable")
        return x.nonzero()


def test_inductor_that_cannot_compile_a_model_says_so_and_names_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "data_dependent.torchscript"
    torch.jit.save(torch.jit.script(_DataDependentModel()), str(path))
    assert load_backend(str(path), graph="auto")(torch.rand(2, 3, 8, 8))[0].shape[1] == 4  # it runs uncompiled
    compiled = load_backend(str(path), graph="inductor")
    with pytest.raises(BackendInitError, match=r"graph=inductor could not compile the model .*graph=auto runs it"):
        compiled.warmup(2, (8, 8))
