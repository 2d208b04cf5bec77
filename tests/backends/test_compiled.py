"""graph=inductor: the torch backend's forward compiled by torch.compile (a TorchScript archive converted to an
exported program first) gives the archive's own outputs at every batch size, compiled before the first frame."""
from __future__ import annotations

import pytest
import torch

from inferstream.backends.loader import load_backend
from inferstream.errors import ConfigError

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
