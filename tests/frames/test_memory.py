"""frames.memory: the one table from a buffer's memory kind to its mapping, on real Gst.Buffers (no pipeline).
Reference: frames.system.mapped_frame called directly, and the errors the CUDA mapping documents."""
from __future__ import annotations

import gi
import numpy as np
import pytest
import torch

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import Gst, GstVideo

from inferstream.errors import UnsupportedFormatError
from inferstream.frames.memory import MEMORY_KINDS, cuda_memory_unavailable, frame_mapper, memory_kind
from inferstream.frames.system import frame_format, mapped_frame

Gst.init(None)


def _rgb_buffer(width: int, height: int) -> tuple[Gst.Buffer, GstVideo.VideoInfo]:
    info = GstVideo.VideoInfo.new()
    info.set_format(GstVideo.VideoFormat.RGB, width, height)
    stride = info.stride[0]  # rows padded to 4 bytes: 30 px of RGB = 90 bytes, stride 92
    img = np.random.default_rng(0).integers(0, 256, (height, stride), dtype=np.uint8)
    return Gst.Buffer.new_wrapped(img.tobytes()), info


def test_memory_kind_names_what_the_caps_feature_says() -> None:
    assert [memory_kind(False, False), memory_kind(True, False), memory_kind(False, True)] == ["system", "cuda", "nvmm"]
    assert set(MEMORY_KINDS) == {"system", "cuda", "nvmm"}


def test_the_system_mapper_is_mapped_frame() -> None:
    buf, info = _rgb_buffer(30, 8)
    fmt = frame_format(info)
    with frame_mapper("system", fmt)(buf) as got, mapped_frame(buf, fmt) as ref:
        assert (got.format, got.width, got.height) == ("RGB", 30, 8)
        assert torch.equal(got.planes[0], ref.planes[0]) and got.planes[0].shape == (8, 30, 3)


def test_the_cuda_mapper_refuses_system_memory() -> None:
    buf, info = _rgb_buffer(32, 8)
    try:
        mapper = frame_mapper("cuda", frame_format(info), device=0)
        with pytest.raises(UnsupportedFormatError, match="not GstCudaMemory"), mapper(buf):
            pass
    except OSError as exc:  # no libgstcuda in this GStreamer build
        pytest.skip(f"GStreamer's CUDA library is not there: {exc}")


def test_cuda_memory_is_unavailable_to_a_cpu_model() -> None:
    assert cuda_memory_unavailable("cpu") == "device=cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device for torch")
def test_cuda_memory_is_unavailable_without_a_gpu_for_torch() -> None:
    assert cuda_memory_unavailable("cuda") == "torch sees no CUDA device"
