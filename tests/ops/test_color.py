from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _reference import DEVICES, yuv_float_reference

from inferstream.ops.color import to_rgb, to_rgb_nchw, yuv_coefficients
from inferstream.rawframe import PACKED_FORMATS, RawFrame

GOLDEN = Path(__file__).with_name("data") / "videoconvert_golden.npz"  # make_videoconvert_golden.py
COLORIMETRY = {"bt601": ("bt601", False), "bt709": ("bt709", False), "1:4:0:0": ("bt601", True),
               "1:3:0:0": ("bt709", True)}  # fmt: skip
CHANNELS = {"R": 0, "G": 1, "B": 2}


def _yuv_frame(fmt: str, y: np.ndarray, u: np.ndarray, v: np.ndarray, matrix: str, full: bool) -> RawFrame:
    ty, tu, tv = (torch.from_numpy(np.ascontiguousarray(a)) for a in (y, u, v))
    planes = (ty, torch.stack((tu, tv), -1)) if fmt == "NV12" else (ty, tu, tv)
    return RawFrame(fmt, y.shape[1], y.shape[0], planes, matrix, full)


def _pack(rgb: np.ndarray, fmt: str, alpha: np.ndarray) -> np.ndarray:
    """Pack an RGB image into ``fmt``'s byte order, the extra channel filled with ``alpha``."""
    planes = {**{c: rgb[..., i] for c, i in CHANNELS.items()}, "A": alpha, "x": alpha}
    return np.stack([planes[c] for c in fmt], -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", ["37x23", "16x12"])
@pytest.mark.parametrize("fmt", ["I420", "NV12"])
@pytest.mark.parametrize("colorimetry", list(COLORIMETRY))
def test_to_rgb_matches_videoconvert_exactly(device: str, size: str, fmt: str, colorimetry: str) -> None:
    gold = np.load(GOLDEN)
    y, u, v = (gold[f"{size}_{c}"] for c in "yuv")
    frame = _yuv_frame(fmt, y, u, v, *COLORIMETRY[colorimetry])
    rgb = to_rgb(frame, device)
    assert rgb.device.type == device
    np.testing.assert_array_equal(rgb.cpu().numpy(), gold[f"{size}_{fmt}_{colorimetry}"])


@pytest.mark.parametrize("colorimetry", list(COLORIMETRY))
def test_to_rgb_stays_near_the_float_formula(colorimetry: str) -> None:
    # videoconvert's integer path is not the textbook formula: pin how far it (and so we) may drift from it.
    matrix, full = COLORIMETRY[colorimetry]
    g = np.random.default_rng(0)
    y = g.integers(16 if not full else 0, 236 if not full else 256, (64, 64), dtype=np.uint8)
    u, v = (g.integers(16 if not full else 0, 241 if not full else 256, (32, 32), dtype=np.uint8) for _ in "uv")
    ours = to_rgb(_yuv_frame("I420", y, u, v, matrix, full), "cpu").numpy().astype(int)
    up = (np.repeat(np.repeat(c, 2, 0), 2, 1) for c in (u, v))
    diff = np.abs(ours - yuv_float_reference(y, *up, matrix, full).astype(int))
    assert diff.max() <= (3 if full else 6)
    assert diff.mean() < (0.8 if full else 2.0)


@pytest.mark.parametrize(
    ("matrix", "full", "expected"),
    [("bt601", False, (298, 409, 516, -100, -208)), ("bt709", False, (298, 459, 541, -55, -136)),
     ("bt601", True, (256, 359, 454, -88, -183)), ("bt709", True, (256, 403, 475, -48, -120))],
)  # fmt: skip
def test_yuv_coefficients_equal_those_fitted_to_videoconvert(
    matrix: str, full: bool, expected: tuple[int, ...]
) -> None:
    assert yuv_coefficients(matrix, full) == expected


@pytest.mark.parametrize("fmt", PACKED_FORMATS)
def test_to_rgb_reorders_every_packed_format(fmt: str) -> None:
    g = np.random.default_rng(1)
    rgb = g.integers(0, 256, (7, 9, 3), dtype=np.uint8)
    packed = _pack(rgb, fmt, g.integers(0, 256, (7, 9), dtype=np.uint8))
    frame = RawFrame(fmt, 9, 7, (torch.from_numpy(packed),))
    np.testing.assert_array_equal(to_rgb(frame, "cpu").numpy(), rgb)


@pytest.mark.parametrize("fmt", ["RGB", "RGBA", "RGBx", "ARGB", "xRGB"])
def test_to_rgb_returns_a_view_when_rgb_is_already_in_order(fmt: str) -> None:
    plane = torch.zeros((5, 6, len(fmt)), dtype=torch.uint8)
    out = to_rgb(RawFrame(fmt, 6, 5, (plane,)), "cpu")
    assert out.untyped_storage().data_ptr() == plane.untyped_storage().data_ptr()


def test_to_rgb_honours_row_strides() -> None:
    g = np.random.default_rng(2)
    w, h = 37, 23
    rows = np.zeros((h, 120), np.uint8)  # stride 120 > 3 * 37: padded rows, as GStreamer lays RGB out
    rows[:, : 3 * w] = g.integers(0, 256, (h, 3 * w), dtype=np.uint8)
    view = torch.from_numpy(rows)[:, : 3 * w].view(h, w, 3)
    assert view.stride() == (120, 3, 1)
    expected = rows[:, : 3 * w].reshape(h, w, 3)
    np.testing.assert_array_equal(to_rgb(RawFrame("RGB", w, h, (view,)), "cpu").numpy(), expected)
    y_rows, uv_rows = np.zeros((h, 40), np.uint8), np.zeros((12, 40), np.uint8)
    y_rows[:, :w] = g.integers(0, 256, (h, w), dtype=np.uint8)
    uv_rows[:, :38] = g.integers(0, 256, (12, 38), dtype=np.uint8)
    y_view, uv_view = torch.from_numpy(y_rows)[:, :w], torch.from_numpy(uv_rows)[:, :38].view(12, 19, 2)
    strided = RawFrame("NV12", w, h, (y_view, uv_view))
    packed = RawFrame("NV12", w, h, tuple(p.contiguous() for p in strided.planes))
    torch.testing.assert_close(to_rgb(strided, "cpu"), to_rgb(packed, "cpu"))


def test_to_rgb_nchw_converts_a_group_like_single_frames() -> None:
    g = np.random.default_rng(3)
    frames = [_yuv_frame("NV12", g.integers(0, 256, (10, 14), dtype=np.uint8),
                         *(g.integers(0, 256, (5, 7), dtype=np.uint8) for _ in "uv"), "bt709", False)
              for _ in range(3)]  # fmt: skip
    batch = to_rgb_nchw(frames, "cpu")
    assert batch.shape == (3, 3, 10, 14)
    for i, f in enumerate(frames):
        torch.testing.assert_close(batch[i].permute(1, 2, 0), to_rgb(f, "cpu"))


def test_to_rgb_nchw_rejects_frames_that_differ() -> None:
    a = RawFrame("RGB", 4, 2, (torch.zeros(2, 4, 3, dtype=torch.uint8),))
    b = RawFrame("RGB", 5, 2, (torch.zeros(2, 5, 3, dtype=torch.uint8),))
    with pytest.raises(ValueError, match=r"frames: expected one \(format, width, height, matrix, full_range\), got"):
        to_rgb_nchw([a, b], "cpu")


def test_to_rgb_nchw_rejects_an_empty_list() -> None:
    with pytest.raises(ValueError, match="frames: expected at least one frame, got none"):
        to_rgb_nchw([], "cpu")


def test_to_rgb_rejects_an_unknown_format() -> None:
    with pytest.raises(ValueError, match=r"format: expected one of \(.*'NV12', 'I420'\), got 'YUY2'"):
        to_rgb(RawFrame("YUY2", 4, 2, (torch.zeros(2, 8, dtype=torch.uint8),)), "cpu")


def test_to_rgb_rejects_planes_that_do_not_fit_the_size() -> None:
    frame = RawFrame("NV12", 8, 6, (torch.zeros(6, 8, dtype=torch.uint8), torch.zeros(3, 8, dtype=torch.uint8)))
    with pytest.raises(ValueError, match=r"NV12 8x6 planes: expected uint8 shapes \[\(6, 8\), \(3, 4, 2\)\], got"):
        to_rgb(frame, "cpu")


def test_to_rgb_rejects_non_uint8_planes() -> None:
    frame = RawFrame("RGB", 4, 2, (torch.zeros(2, 4, 3, dtype=torch.float32),))
    expected = r"RGB 4x2 planes: expected uint8 shapes \[\(2, 4, 3\)\], got \['torch.float32'\]"
    with pytest.raises(ValueError, match=expected):
        to_rgb(frame, "cpu")


def test_to_rgb_rejects_an_unknown_matrix() -> None:
    z = np.zeros((2, 2), np.uint8)
    with pytest.raises(ValueError, match=r"matrix: expected one of \['bt601', 'bt709'\], got 'bt2020'"):
        to_rgb(_yuv_frame("I420", np.zeros((4, 4), np.uint8), z, z, "bt2020", False), "cpu")


def test_yuv_coefficients_rejects_an_unknown_matrix() -> None:
    with pytest.raises(ValueError, match=r"matrix: expected one of \['bt601', 'bt709'\], got 'smpte240m'"):
        yuv_coefficients("smpte240m", False)
