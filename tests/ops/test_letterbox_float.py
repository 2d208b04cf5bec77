"""The fast (convert in float at full resolution, then resize) letterbox against the exact one, on real images
converted to YUV 4:2:0.

Bounds are in levels (1/255 of the model input) over the resized image (the padding must match exactly). Measured
on bus.jpg, a 639x481 crop of it and vtest.avi frames, every colorimetry, fp32 and fp16, resized to 320x480,
640x640 or 1088x1088: mean |diff| 0.44-0.76 (inside the letterbox), mean diff -0.24..+0.19, 99.9th percentile 1.7-3.1, maximum 1.8-4.4
(NV12 up to 4.4, I420 up to 2.9). Before out-of-gamut pixels were clamped at full resolution (the fast path
resized first and clamped after) the maximum was 21-35 levels, at sharp saturated edges. What is left: the fitted
coefficients and the float resize against videoconvert's integer terms and cv2's fixed point.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _reference import DEVICES, bus_bgr

from inferstream.ops.letterbox import Letterbox, letterbox_geometry, preprocess_batch
from inferstream.rawframe import RawFrame

COLORIMETRY = [("bt601", False), ("bt709", False), ("bt601", True), ("bt709", True)]
KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}
SIZE = (640, 640)


def _yuv420(bgr: np.ndarray, matrix: str, full: bool) -> tuple[np.ndarray, ...]:
    """Textbook RGB→YUV in float64, chroma averaged over 2x2 blocks (edges replicated for odd sizes): uint8."""
    kr, kb = KR_KB[matrix]
    r, g, b = (bgr[..., i].astype(np.float64) for i in (2, 1, 0))
    y = kr * r + (1 - kr - kb) * g + kb * b
    cb, cr = (b - y) / (2 * (1 - kb)), (r - y) / (2 * (1 - kr))
    if not full:
        y, cb, cr = 16 + y * 219 / 255, cb * 224 / 255, cr * 224 / 255
    h, w = y.shape

    def subsample(c: np.ndarray) -> np.ndarray:
        c = np.pad(c + 128, ((0, h % 2), (0, w % 2)), mode="edge")
        return c.reshape(c.shape[0] // 2, 2, c.shape[1] // 2, 2).mean(axis=(1, 3))

    return tuple(np.clip(np.round(p), 0, 255).astype(np.uint8) for p in (y, subsample(cb), subsample(cr)))


def _pitched(plane: np.ndarray, pad: int) -> torch.Tensor:
    """``plane`` as a view whose rows are ``pad`` bytes longer than its pixels (as GStreamer pools lay them out)."""
    h, row = plane.shape[0], plane[0].size
    buf = np.zeros((h, row + pad), np.uint8)
    buf[:, :row] = plane.reshape(h, row)
    return torch.from_numpy(buf)[:, :row].view(plane.shape)


def _frame(fmt: str, bgr: np.ndarray, matrix: str = "bt601", full: bool = False, pad: int = 0) -> RawFrame:
    h, w = bgr.shape[:2]
    if fmt in ("BGR", "RGBx"):
        packed = bgr if fmt == "BGR" else np.concatenate([bgr[..., ::-1], np.zeros((h, w, 1), np.uint8)], -1)
        return RawFrame(fmt, w, h, (_pitched(packed, pad),))
    y, u, v = _yuv420(bgr, matrix, full)
    planes = (y, np.stack([u, v], -1)) if fmt == "NV12" else (y, u, v)
    return RawFrame(fmt, w, h, tuple(_pitched(p, pad) for p in planes), matrix, full)


@pytest.fixture(scope="module")
def images(vtest: Path) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(vtest))
    ok, frame = cap.read()
    cap.release()
    assert ok
    bus = bus_bgr()
    return [bus, np.ascontiguousarray(bus[:481, :639]), frame]  # 810x1080, 639x481 (odd), 768x576


def _levels(fast: torch.Tensor, exact: torch.Tensor) -> tuple[float, float, float, float]:
    """mean |d|, mean d, 99.9th percentile of |d| and max |d| of ``fast - exact``, in levels."""
    d = (fast.double() - exact.double()).flatten() * 255
    return d.abs().mean().item(), d.mean().item(), d.abs().quantile(0.999).item(), d.abs().max().item()


def _assert_same_letterbox(a: Letterbox, b: Letterbox) -> None:
    for name in ("scale_x", "scale_y", "pad_x", "pad_y"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize(("matrix", "full"), COLORIMETRY)
@pytest.mark.parametrize("fmt", ["NV12", "I420"])
def test_fast_path_stays_near_the_exact_path_on_real_images(
    images: list[np.ndarray], fmt: str, matrix: str, full: bool, dtype: torch.dtype
) -> None:
    frames = [_frame(fmt, img, matrix, full) for img in images]  # three sizes: three groups
    fast, lb_fast = preprocess_batch(frames, SIZE, "cpu", dtype, exact=False)
    exact, lb_exact = preprocess_batch(frames, SIZE, "cpu", dtype, exact=True)
    assert fast.dtype == exact.dtype == dtype and fast.shape == exact.shape == (3, 3, *SIZE)
    _assert_same_letterbox(lb_fast, lb_exact)
    for i, f in enumerate(frames):
        new_h, new_w, top, left = letterbox_geometry((f.height, f.width), SIZE)
        inside = torch.zeros(SIZE, dtype=torch.bool)
        inside[top : top + new_h, left : left + new_w] = True
        assert torch.equal(fast[i][:, ~inside], exact[i][:, ~inside])  # the padding, 114 / 255
        mean, bias, p999, worst = _levels(fast[i][:, inside], exact[i][:, inside])
        assert mean < 0.8 and abs(bias) < 0.35 and p999 < 3.5 and worst < 5, (i, mean, bias, p999, worst)


@pytest.mark.parametrize("size_hw", [(320, 480), (1088, 1088)])  # downscaled more, upscaled
@pytest.mark.parametrize("fmt", ["NV12", "I420"])
def test_fast_path_stays_near_the_exact_path_at_other_scales(
    images: list[np.ndarray], fmt: str, size_hw: tuple[int, int]
) -> None:
    frames = [_frame(fmt, img, "bt709") for img in images]
    fast, _ = preprocess_batch(frames, size_hw, "cpu", torch.float32, exact=False)
    exact, _ = preprocess_batch(frames, size_hw, "cpu", torch.float32, exact=True)
    mean, bias, p999, worst = _levels(fast, exact)
    assert mean < 0.7 and abs(bias) < 0.35 and p999 < 3.5 and worst < 5, (mean, bias, p999, worst)


@pytest.mark.parametrize(("matrix", "full"), COLORIMETRY)
def test_fast_nv12_matches_the_exact_path_within_rounding_at_identity_scale(
    images: list[np.ndarray], matrix: str, full: bool
) -> None:
    # no resize: what is left is chroma siting, the float chroma filter and the fitted coefficients
    for img in images[1:]:  # 639x481 (odd) and 768x576
        frame = _frame("NV12", img, matrix, full)
        size = (frame.height, frame.width)
        fast, _ = preprocess_batch([frame], size, "cpu", torch.float32, exact=False)
        exact, _ = preprocess_batch([frame], size, "cpu", torch.float32, exact=True)
        mean, bias, _, worst = _levels(fast, exact)
        assert mean < 0.85 and abs(bias) < 0.5 and worst < 5, (size, mean, bias, worst)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", ["BGR", "RGBx"])
def test_fast_path_resizes_packed_formats_within_a_level(
    images: list[np.ndarray], fmt: str, dtype: torch.dtype
) -> None:
    frames = [_frame(fmt, img) for img in images]
    fast, lb_fast = preprocess_batch(frames, SIZE, "cpu", dtype, exact=False)
    exact, lb_exact = preprocess_batch(frames, SIZE, "cpu", dtype, exact=True)
    _assert_same_letterbox(lb_fast, lb_exact)
    mean, _, _, worst = _levels(fast, exact)
    assert mean < 0.25 and worst < 1, (mean, worst)  # float bilinear vs cv2's fixed point


@pytest.mark.parametrize("fmt", ["NV12", "I420", "RGBx", "BGR"])
def test_fast_path_reads_pitched_planes_like_packed_ones(images: list[np.ndarray], fmt: str) -> None:
    img = images[1]  # odd width: pitched rows are not a multiple of anything convenient
    pitched = [_frame(fmt, img, pad=pad) for pad in (64, 64, 0)]  # one group: equal pitches, then a mixed one
    assert pitched[0].planes[0].stride(0) > pitched[2].planes[0].stride(0)
    packed = _frame(fmt, img)
    alone, _ = preprocess_batch([packed], SIZE, "cpu", torch.float32, exact=False)
    for frames in (pitched[:2], pitched):
        batch, _ = preprocess_batch(frames, SIZE, "cpu", torch.float32, exact=False)
        for row in batch:
            torch.testing.assert_close(row, alone[0], rtol=0, atol=0)


def test_fast_path_batches_interleaved_groups_like_single_frames(images: list[np.ndarray]) -> None:
    bus, crop, vt = images
    frames = [_frame("NV12", bus), _frame("I420", crop, "bt709", True), _frame("NV12", np.roll(bus, 9, 1)),
              _frame("BGR", vt), _frame("NV12", vt, "bt709")]  # fmt: skip
    batch, lb = preprocess_batch(frames, (384, 640), "cpu", torch.float16, exact=False)
    _, lb_exact = preprocess_batch(frames, (384, 640), "cpu", torch.float16, exact=True)
    _assert_same_letterbox(lb, lb_exact)
    for i, f in enumerate(frames):
        alone, _ = preprocess_batch([f], (384, 640), "cpu", torch.float16, exact=False)
        torch.testing.assert_close(batch[i], alone[0], rtol=0, atol=0)


def test_fast_path_issues_the_same_operations_whatever_the_batch_size(images: list[np.ndarray]) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountKernels(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if not func.is_view:
                self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    img = np.ascontiguousarray(images[0][:200, :300])
    for fmt in ("NV12", "I420", "BGR"):
        counts = []
        for n in (2, 7):  # from 2 on: the Letterbox's transpose copies one more tensor than for a single frame
            frames = [_frame(fmt, img, pad=32)] * n
            preprocess_batch(frames, (64, 64), "cpu", torch.float16, exact=False)  # warm the coefficient cache
            with CountKernels() as mode:
                preprocess_batch(frames, (64, 64), "cpu", torch.float16, exact=False)
            counts.append(mode.ops)
        assert counts[0] == counts[1] and len(counts[0]) <= 14, (fmt, counts[0])


def test_default_is_the_exact_path_on_cpu(images: list[np.ndarray]) -> None:
    frames = [_frame("NV12", images[2], "bt709"), _frame("BGR", images[1])]
    default, _ = preprocess_batch(frames, SIZE, "cpu", torch.float32)
    exact, _ = preprocess_batch(frames, SIZE, "cpu", torch.float32, exact=True)
    assert torch.equal(default, exact)


@pytest.mark.parametrize("device", DEVICES)
def test_default_is_fast_on_cuda_only(images: list[np.ndarray], device: str) -> None:
    frames = [_frame("NV12", images[1], "bt709", pad=16), _frame("I420", images[2])]
    out, lb = preprocess_batch(frames, SIZE, device, torch.float32)
    ref, lb_ref = preprocess_batch(frames, SIZE, "cpu", torch.float32, exact=device == "cpu")
    assert out.device.type == device
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=1e-4)  # CUDA's float interpolation, not bit-exact
    _assert_same_letterbox(Letterbox(*(t.cpu() for t in (lb.scale_x, lb.scale_y, lb.pad_x, lb.pad_y))), lb_ref)


def test_fast_path_converts_large_groups_in_chunks_with_the_same_result(
    images: list[np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    import inferstream.ops.letterbox_float as fast

    frames = [_frame("NV12", np.roll(images[2], 40 * i, 1), "bt709") for i in range(5)]
    whole, _ = preprocess_batch(frames, SIZE, "cpu", torch.float32, exact=False)
    monkeypatch.setattr(fast, "MAX_CHUNK_PIXELS", 2 * frames[0].width * frames[0].height)  # chunks of 2, 2, 1
    chunked, _ = preprocess_batch(frames, SIZE, "cpu", torch.float32, exact=False)
    assert torch.equal(whole, chunked)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("fmt", ["NV12", "I420"])
def test_resize_first_stays_within_tens_of_levels_and_the_float_path_within_a_few(
    images: list[np.ndarray], fmt: str, dtype: torch.dtype
) -> None:
    # resize-first clamps out-of-gamut pixels after the resize: 21-35 levels off at sharp saturated edges
    # (measured), under a level on average; converting first keeps every pixel within 5
    frames = [_frame(fmt, img, "bt709") for img in images]
    exact, _ = preprocess_batch(frames, SIZE, "cpu", dtype, exact=True)
    first, lb_first = preprocess_batch(frames, SIZE, "cpu", dtype, exact=False, resize_first=True)
    converted, lb = preprocess_batch(frames, SIZE, "cpu", dtype, exact=False)
    _assert_same_letterbox(lb_first, lb)
    mean, bias, p999, worst = _levels(first, exact)
    assert mean < 0.95 and abs(bias) < 0.5 and p999 < 10 and 5 < worst < 40, (mean, bias, p999, worst)
    assert _levels(converted, exact)[3] < 5


def test_packed_rgb_stretched_in_float_is_the_input_of_torchvisions_resize_bit_for_bit() -> None:
    """RF-DETR's predict (and torchvision's tensor transforms) divide by 255, resize, then normalise: the float
    path on an RGB frame must give exactly that input, as a random-weight DETR moves a query on a 1e-7 difference."""
    import torchvision.transforms.functional as TF

    rgb = np.ascontiguousarray(bus_bgr()[..., ::-1])
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    frame = RawFrame("RGB", rgb.shape[1], rgb.shape[0], (torch.from_numpy(rgb),))
    ours, _ = preprocess_batch([frame], (384, 384), "cpu", torch.float32, exact=False, stretch=True, mean=mean,
                               std=std)
    chw = torch.from_numpy(rgb).permute(2, 0, 1).float().div_(torch.tensor(255.0))
    reference = TF.normalize(TF.resize(chw, [384, 384], antialias=False), list(mean), list(std))
    assert torch.equal(ours[0], reference)
