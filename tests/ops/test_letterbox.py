from __future__ import annotations

import numpy as np
import pytest
import torch
from _reference import DEVICES, bgr_frame, bus_bgr, ultralytics, ultralytics_input

from inferstream.ops.letterbox import (
    Letterbox,
    clip_xyxy,
    letterbox_geometry,
    preprocess_batch,
    rect_geometry,
    rect_input_size,
    unletterbox_xyxy,
)
from inferstream.rawframe import RawFrame

FRAME_SIZES = [(1080, 810), (301, 523), (480, 640), (720, 1280), (1, 3000), (3000, 1), (641, 639), (100, 100)]
INPUT_SIZES = [(640, 640), (320, 480), (384, 640), (33, 17)]


@pytest.mark.parametrize("frame_hw", FRAME_SIZES)
@pytest.mark.parametrize("size_hw", INPUT_SIZES)
def test_letterbox_geometry_matches_ultralytics(frame_hw: tuple[int, int], size_hw: tuple[int, int]) -> None:
    ultralytics()
    from ultralytics.data.augment import LetterBox

    p = LetterBox(size_hw, auto=False).get_params({"img": np.zeros((*frame_hw, 3), np.uint8)})
    new_h, new_w, top, left = letterbox_geometry(frame_hw, size_hw)
    assert (new_w, new_h, top, left) == (*p["new_unpad"], p["top"], p["left"])
    assert (top + new_h + p["bottom"], left + new_w + p["right"]) == size_hw


CROPS = [(slice(None), slice(None)), (slice(0, 301), slice(0, 523)), (slice(5, 45), slice(0, 800))]


@pytest.mark.parametrize("crop", CROPS)
@pytest.mark.parametrize("size_hw", [(640, 640), (320, 480)])
def test_preprocess_batch_matches_ultralytics_letterbox(crop: tuple[slice, slice], size_hw: tuple[int, int]) -> None:
    img = np.ascontiguousarray(bus_bgr()[crop])
    ours, _ = preprocess_batch([bgr_frame(img)], size_hw, "cpu", torch.float32)
    diff = (ours - ultralytics_input(img, size_hw)).abs() * 255
    if letterbox_geometry(img.shape[:2], size_hw)[0] <= img.shape[0]:  # downscaled: cv2's arithmetic exactly
        assert diff.max() < 1e-3
    else:  # upscaled: cv2 ends some rows with its scalar kernel, one level apart from the SIMD one we mirror
        assert diff.max() < 1 + 1e-3 and (diff > 1e-3).float().mean() < 1e-3


def test_preprocess_batch_mixes_sizes_and_formats() -> None:
    img = bus_bgr()
    small = np.ascontiguousarray(img[200:500, 100:700])
    rgba = np.concatenate([small[..., ::-1], np.full((*small.shape[:2], 1), 255, np.uint8)], -1)
    frames = [bgr_frame(img), RawFrame("RGBA", 600, 300, (torch.from_numpy(rgba),)), bgr_frame(small), bgr_frame(img)]
    batch, lb = preprocess_batch(frames, (320, 320), "cpu", torch.float32)
    assert batch.shape == (4, 3, 320, 320) and batch.dtype == torch.float32
    for i, f in enumerate(frames):
        alone, lb1 = preprocess_batch([f], (320, 320), "cpu", torch.float32)
        torch.testing.assert_close(batch[i], alone[0])
        for name in ("scale_x", "scale_y", "pad_x", "pad_y"):
            assert getattr(lb, name)[i] == getattr(lb1, name)[0]
    torch.testing.assert_close(batch[1], batch[2])  # same pixels, RGBA and BGR
    assert lb.pad_x.tolist() == [40.0, 0.0, 0.0, 40.0] and lb.pad_y.tolist() == [0.0, 80.0, 80.0, 0.0]
    torch.testing.assert_close(lb.scale_x, torch.tensor([240 / 810, 320 / 600, 320 / 600, 240 / 810]))


@pytest.mark.parametrize("device", DEVICES)
def test_exact_preprocess_batch_gives_the_same_pixels_on_every_device(device: str) -> None:
    img = bus_bgr()
    g = np.random.default_rng(0)
    y, u, v = g.integers(0, 256, (480, 640), np.uint8), *(g.integers(0, 256, (240, 320), np.uint8) for _ in "uv")
    nv12 = RawFrame("NV12", 640, 480, (torch.from_numpy(y), torch.from_numpy(np.stack([u, v], -1))), "bt709")
    i420 = RawFrame("I420", 640, 480, tuple(torch.from_numpy(p) for p in (y, u, v)), "bt601", True)
    frames = [bgr_frame(img), nv12, bgr_frame(np.ascontiguousarray(img[:100, :300])), i420]
    ref, ref_lb = preprocess_batch(frames, (320, 480), "cpu", torch.float32)
    out, lb = preprocess_batch(frames, (320, 480), device, torch.float32, exact=True)  # CUDA defaults to the fast path
    assert out.device.type == device and lb.scale_x.device.type == "cpu"  # the transform stays on the host
    # the same uint8 levels everywhere; CUDA's division by 255 may round the float32 result one ulp apart. The CPU
    # runs cv2 itself where OpenCV is installed: frame 2, upscaled, may then be one level off the emulation
    # (where cv2 finishes a row with its scalar kernel) on a few pixels
    down = [0, 1, 3]
    torch.testing.assert_close(out.cpu()[down], ref[down], rtol=0, atol=1e-7)
    assert torch.equal((out.cpu()[down] * 255).round(), (ref[down] * 255).round())
    up = ((out.cpu()[2] - ref[2]).abs() * 255).round()
    assert up.max() <= 1 and (up > 0).float().mean() < 1e-3
    torch.testing.assert_close(lb.pad_y.cpu(), ref_lb.pad_y)


def test_preprocess_batch_pads_with_114_and_casts_to_dtype() -> None:
    frame = RawFrame("RGB", 8, 4, (torch.zeros(4, 8, 3, dtype=torch.uint8),))
    batch, lb = preprocess_batch([frame], (16, 16), "cpu", torch.float16)
    assert batch.dtype == torch.float16 and (lb.pad_y.item(), lb.pad_x.item()) == (4.0, 0.0)
    assert torch.all(batch[0, :, :4] == torch.tensor(114 / 255, dtype=torch.float16))
    assert torch.all(batch[0, :, 4:12] == 0) and torch.all(batch[0, :, 12:] == torch.tensor(114 / 255).half())


def test_unletterbox_xyxy_and_clip_match_ultralytics_scale_boxes() -> None:
    ultralytics()
    from ultralytics.utils.ops import scale_boxes

    g = torch.Generator().manual_seed(0)
    boxes = torch.rand(64, 4, generator=g) * 680 - 20
    boxes = torch.cat((boxes[:, :2], boxes[:, :2] + torch.rand(64, 2, generator=g) * 200), 1)
    sizes = [(1080, 810), (301, 523), (767, 575), (1, 3000)]
    geometry = [letterbox_geometry(frame_hw, (640, 640)) for frame_hw in sizes]
    lb = Letterbox(*(torch.tensor(v, dtype=torch.float32) for v in zip(*[
        (new_w / w, new_h / h, left, top) for (h, w), (new_h, new_w, top, left) in zip(sizes, geometry)])))
    # every box once per frame: one batch whose rows belong to four frames
    image_ids = torch.arange(len(sizes)).repeat_interleave(len(boxes))
    frame_wh = torch.tensor([(w, h) for h, w in sizes], dtype=torch.float32)[image_ids]
    ours = clip_xyxy(unletterbox_xyxy(boxes.repeat(len(sizes), 1), lb, image_ids), frame_wh)
    theirs = torch.cat([scale_boxes((640, 640), boxes.clone(), frame_hw) for frame_hw in sizes])
    torch.testing.assert_close(ours, theirs)


def test_unletterbox_xyxy_takes_each_boxs_image() -> None:
    frames = [RawFrame("RGB", w, h, (torch.zeros(h, w, 3, dtype=torch.uint8),)) for h, w in [(100, 200), (300, 100)]]
    _, lb = preprocess_batch(frames, (64, 64), "cpu", torch.float32)
    boxes = torch.tensor([[0.0, 16.0, 64.0, 48.0], [21.0, 0.0, 42.0, 64.0], [31.5, 32.0, 31.5, 32.0]])
    out = unletterbox_xyxy(boxes, lb, torch.tensor([0, 1, 1]))
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 200.0, 100.0], [0.0, 0.0, 100.0, 300.0],
                                                  [50.0, 150.0, 50.0, 150.0]]))  # fmt: skip


def test_clip_xyxy_clamps_to_each_boxs_frame() -> None:
    boxes = torch.tensor([[-5.0, -5.0, 500.0, 500.0], [10.0, 20.0, 30.0, 40.0]])
    out = clip_xyxy(boxes, torch.tensor([[200.0, 100.0], [25.0, 25.0]]))
    assert out.tolist() == [[0.0, 0.0, 200.0, 100.0], [10.0, 20.0, 25.0, 25.0]]
    assert clip_xyxy(boxes, torch.tensor([20.0, 30.0])).tolist() == [[0.0, 0.0, 20.0, 30.0], [10.0, 20.0, 20.0, 30.0]]


def test_preprocess_batch_rejects_no_frames() -> None:
    with pytest.raises(ValueError, match="frames: expected at least one frame, got none"):
        preprocess_batch([], (640, 640), "cpu", torch.float32)


def test_preprocess_batch_rejects_a_bad_size() -> None:
    frame = RawFrame("RGB", 8, 4, (torch.zeros(4, 8, 3, dtype=torch.uint8),))
    with pytest.raises(ValueError, match=r"size_hw: expected \(height, width\) as two positive ints, got \(640, 0\)"):
        preprocess_batch([frame], (640, 0), "cpu", torch.float32)


def test_preprocess_batch_rejects_an_integer_dtype() -> None:
    frame = RawFrame("RGB", 8, 4, (torch.zeros(4, 8, 3, dtype=torch.uint8),))
    with pytest.raises(ValueError, match="dtype: expected a floating dtype, got torch.uint8"):
        preprocess_batch([frame], (16, 16), "cpu", torch.uint8)


def test_letterbox_geometry_rejects_a_bad_frame_size() -> None:
    with pytest.raises(ValueError, match=r"frame_hw: expected \(height, width\) as two positive ints, got \(0, 5\)"):
        letterbox_geometry((0, 5), (640, 640))


def test_unletterbox_rejects_boxes_that_are_not_n_by_4() -> None:
    lb = Letterbox(*(torch.ones(1) for _ in range(4)))
    with pytest.raises(ValueError, match=r"boxes: expected a float Tensor\[N, 4\], got torch.float32 \(3, 5\)"):
        unletterbox_xyxy(torch.zeros(3, 5), lb, torch.zeros(3, dtype=torch.int64))


def test_unletterbox_rejects_image_ids_that_are_not_one_per_box() -> None:
    lb = Letterbox(*(torch.ones(1) for _ in range(4)))
    with pytest.raises(ValueError, match=r"image_ids: expected an int64 Tensor\[3\], got torch.int64 \(3, 1\)"):
        unletterbox_xyxy(torch.zeros(3, 4), lb, torch.zeros((3, 1), dtype=torch.int64))
    with pytest.raises(ValueError, match=r"image_ids: expected an int64 Tensor\[3\], got torch.int32 \(3,\)"):
        unletterbox_xyxy(torch.zeros(3, 4), lb, torch.zeros(3, dtype=torch.int32))


def test_clip_xyxy_rejects_a_frame_size_per_box_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"frame_wh: expected a Tensor\[2, 2\] or Tensor\[2\], got \(2, 1\)"):
        clip_xyxy(torch.zeros(2, 4), torch.ones(2, 1))


def test_clip_xyxy_rejects_integer_boxes() -> None:
    with pytest.raises(ValueError, match=r"boxes: expected a float Tensor\[N, 4\], got torch.int64 \(2, 4\)"):
        clip_xyxy(torch.zeros(2, 4, dtype=torch.int64), torch.tensor([10.0, 10.0]))


def test_stretch_float_normalised_batch_matches_torchvision_as_rfdetr_does_it() -> None:
    """RF-DETR's predict: RGB / 255, ``F.resize(antialias=False)`` to the whole input, ``F.normalize``."""
    import torchvision.transforms.functional as F

    img = np.ascontiguousarray(bus_bgr()[..., ::-1])  # RGB
    frame = RawFrame("RGB", img.shape[1], img.shape[0], (torch.from_numpy(img),))
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    batch, lb = preprocess_batch([frame], (384, 384), "cpu", torch.float32, exact=False, stretch=True,
                                 mean=mean, std=std)
    ref = F.normalize(F.resize(torch.from_numpy(img).permute(2, 0, 1).float() / 255, [384, 384], antialias=False),
                      list(mean), list(std))
    torch.testing.assert_close(batch[0], ref, atol=1e-5, rtol=0)
    assert (lb.pad_x.item(), lb.pad_y.item()) == (0.0, 0.0)
    assert (lb.scale_x.item(), lb.scale_y.item()) == pytest.approx((384 / img.shape[1], 384 / img.shape[0]))


def test_preprocess_batch_swaps_channels_and_pads_with_the_given_level() -> None:
    img = np.zeros((10, 20, 3), np.uint8)
    img[..., 0] = 255  # pure red
    frame = RawFrame("RGB", 20, 10, (torch.from_numpy(img),))
    batch, _ = preprocess_batch([frame], (20, 20), "cpu", torch.float32, pad_value=0, bgr=True)
    assert batch[0, :, 5:15].mean(dim=(1, 2)).tolist() == [0.0, 0.0, 1.0]  # red lands in the last channel
    assert batch[0, :, :5].abs().max().item() == 0.0  # padding at level 0


def test_letterbox_geometry_stretch_fills_the_input() -> None:
    assert letterbox_geometry((576, 768), (384, 384), stretch=True) == (384, 384, 0, 0)


# the last three: sizes where taking the scale from the rectangle itself would land one pixel off ultralytics
RECT_CASES = [(f, 640) for f in FRAME_SIZES] + [((576, 768), 640), ((3470, 348), 1280), ((2819, 1622), 1280),
                                                ((881, 2196), 320)]


@pytest.mark.parametrize(("frame_hw", "side"), RECT_CASES)
def test_rect_input_size_and_geometry_match_ultralytics_auto_letterbox(frame_hw: tuple[int, int], side: int) -> None:
    ultralytics()
    from ultralytics.data.augment import LetterBox

    p = LetterBox((side, side), auto=True, stride=32).get_params({"img": np.zeros((*frame_hw, 3), np.uint8)})
    size_hw = rect_input_size([frame_hw], (side, side), 32)
    assert size_hw == (p["top"] + p["new_unpad"][1] + p["bottom"], p["left"] + p["new_unpad"][0] + p["right"])
    new_h, new_w, top, left = rect_geometry(frame_hw, (side, side), size_hw)
    assert (new_w, new_h, top, left) == (*p["new_unpad"], p["top"], p["left"])


def test_rect_input_size_of_vtest_is_640x480_and_a_mixed_batch_takes_the_largest_sides() -> None:
    assert rect_input_size([(576, 768)], (640, 640), 32) == (480, 640)  # vtest.avi: a quarter fewer pixels
    assert rect_input_size([(576, 768), (1080, 1920)], (640, 640), 32) == (480, 640)  # 16:9 fits in 4:3's
    assert rect_input_size([(576, 768), (768, 576)], (640, 640), 32) == (640, 640)  # landscape + portrait


def test_preprocess_batch_with_fit_hw_matches_ultralytics_rect_letterbox() -> None:
    ultralytics()
    from ultralytics.data.augment import LetterBox

    img = np.ascontiguousarray(bus_bgr()[:700])  # 810x700 (w x h): a 640x576 rectangle
    size_hw = rect_input_size([img.shape[:2]], (640, 640), 32)
    ours, lb = preprocess_batch([bgr_frame(img)], size_hw, "cpu", torch.float32, fit_hw=(640, 640))
    boxed = LetterBox((640, 640), auto=True, stride=32)(image=img)
    ref = torch.from_numpy(np.ascontiguousarray(boxed[..., ::-1].transpose(2, 0, 1))).float()[None] / 255
    assert ours.shape == ref.shape == (1, 3, 576, 640)
    assert ((ours - ref).abs() * 255).max() < 1e-3  # downscaled: cv2's arithmetic exactly
    # a frame of another size in the same batch keeps the scale 640x640 gives it, centred in the rectangle
    both, lb2 = preprocess_batch([bgr_frame(img), bgr_frame(img[:400])], size_hw, "cpu", torch.float32,
                                 fit_hw=(640, 640))
    torch.testing.assert_close(both[:1], ours)
    torch.testing.assert_close(lb2.scale_x, torch.tensor([lb.scale_x.item(), 640 / 810]))
    assert lb2.pad_y[1].item() == (576 - 316) // 2


def test_rect_input_size_and_geometry_reject_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one frame"):
        rect_input_size([], (640, 640), 32)
    with pytest.raises(ValueError, match="stride: expected a positive int"):
        rect_input_size([(480, 640)], (640, 640), 0)
    with pytest.raises(ValueError, match="smaller than the resized frame"):
        rect_geometry((576, 768), (640, 640), (448, 640))
