"""The fused CUDA letterbox kernel (``ops.letterbox_kernel``) against ``letterbox_float``'s torch ops on the CPU.

Same definition, compared in float32 (the torch ops round every intermediate to the canvas dtype when it is fp16,
the kernel only its output), so they agree within a level; the torch ops' distance to the exact path is pinned in
``test_letterbox_float.py``. Synthetic scenes (gradients, noise, saturated blocks with sharp edges: the pixels where
clamping matters), so the test needs no data files on the GPU machine.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from inferstream.ops.letterbox import preprocess_batch
from inferstream.ops.letterbox_kernel import MAX_FRAMES, letterbox_yuv420_into
from inferstream.rawframe import RawFrame

from .test_letterbox_float import _frame

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _scene(h: int, w: int, seed: int) -> np.ndarray:
    """BGR uint8: two gradients, noise, and saturated colour blocks with one-pixel edges."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([255 * x / w, 255 * y / h, 127 + 127 * np.sin(x / 7.0 + y / 11.0)], -1)
    img += rng.normal(0, 12, img.shape)
    for _ in range(12):
        top, left = rng.integers(0, h - 8), rng.integers(0, w - 8)
        img[top : top + rng.integers(4, h // 3), left : left + rng.integers(4, w // 3)] = rng.choice([0, 255], 3)
    return np.clip(img, 0, 255).astype(np.uint8)


def _on_cuda(frame: RawFrame) -> RawFrame:
    """``frame`` with its planes copied to the GPU, pitch (row padding) kept."""
    planes = []
    for p in frame.planes:
        span = 1 + sum((n - 1) * s for n, s in zip(p.shape, p.stride()))
        planes.append(p.as_strided((span,), (1,)).to("cuda").as_strided(p.shape, p.stride()))
    return RawFrame(frame.format, frame.width, frame.height, tuple(planes), frame.matrix, frame.full_range)


def _levels(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    d = (a.double().cpu() - b.double().cpu()).abs() * 255
    return d.mean().item(), d.max().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("matrix", "full"), [("bt601", False), ("bt709", True)])
@pytest.mark.parametrize(("h", "w"), [(1080, 1920), (481, 639)])
@pytest.mark.parametrize("fmt", ["NV12", "I420"])
def test_kernel_matches_the_torch_ops_within_a_level(
    fmt: str, h: int, w: int, matrix: str, full: bool, dtype: torch.dtype
) -> None:
    frames = [_frame(fmt, _scene(h, w, seed), matrix, full, pad=64) for seed in range(3)]
    gpu_frames = [_on_cuda(f) for f in frames]
    canvas = torch.zeros((3, 3, 360, 640), dtype=dtype, device="cuda")
    assert letterbox_yuv420_into(gpu_frames, canvas)  # the kernel applies: it is what preprocess_batch runs here
    gpu, _ = preprocess_batch(gpu_frames, (640, 640), "cuda", dtype, exact=False)
    # the reference in float32: in fp16 the torch ops round every intermediate (up to 1.25 levels off the kernel)
    cpu, _ = preprocess_batch(frames, (640, 640), "cpu", torch.float32, exact=False)
    mean, worst = _levels(gpu, cpu)
    # one level where a full-resolution pixel rounds the other way; fp16 adds its own rounding (0.06 level at most)
    if dtype == torch.float32:
        assert mean < 0.01 and worst <= 1.01, (mean, worst)
    else:
        assert mean < 0.04 and worst <= 1.07, (mean, worst)


def test_kernel_reads_each_frame_at_its_own_pitch() -> None:
    img = _scene(481, 639, 5)
    frames = [_on_cuda(_frame("NV12", img, pad=pad)) for pad in (64, 0, 128)]
    alone, _ = preprocess_batch(frames[1:2], (640, 640), "cuda", torch.float32, exact=False)
    batch, _ = preprocess_batch(frames, (640, 640), "cuda", torch.float32, exact=False)
    for row in batch:
        torch.testing.assert_close(row, alone[0], rtol=0, atol=0)


def test_groups_larger_than_one_launch_convert_every_frame() -> None:
    n = MAX_FRAMES + 6
    frames = [_on_cuda(_frame("I420", _scene(48, 64, seed), "bt709")) for seed in range(n)]
    batch, _ = preprocess_batch(frames, (96, 96), "cuda", torch.float16, exact=False)
    for i in (0, MAX_FRAMES - 1, MAX_FRAMES, n - 1):
        alone, _ = preprocess_batch([frames[i]], (96, 96), "cuda", torch.float16, exact=False)
        torch.testing.assert_close(batch[i], alone[0], rtol=0, atol=0)


def test_interleaved_groups_convert_like_single_frames() -> None:
    a, b = _scene(240, 320, 1), _scene(201, 333, 2)
    frames = [_on_cuda(f) for f in (_frame("NV12", a), _frame("I420", b, "bt709", True), _frame("NV12", a[::-1]),
                                    _frame("BGR", b), _frame("NV12", a[:, ::-1], "bt709"))]
    batch, _ = preprocess_batch(frames, (384, 640), "cuda", torch.float16, exact=False)
    for i, f in enumerate(frames):
        alone, _ = preprocess_batch([f], (384, 640), "cuda", torch.float16, exact=False)
        torch.testing.assert_close(batch[i], alone[0], rtol=0, atol=0)


def test_frames_in_host_memory_take_the_torch_ops() -> None:
    frame = _frame("NV12", _scene(64, 96, 3))
    canvas = torch.zeros((1, 3, 64, 96), device="cuda")
    assert not letterbox_yuv420_into([frame], canvas)
    gpu, _ = preprocess_batch([frame], (64, 96), "cuda", torch.float32, exact=False)
    cpu, _ = preprocess_batch([frame], (64, 96), "cpu", torch.float32, exact=False)
    assert _levels(gpu, cpu)[1] <= 1.01
