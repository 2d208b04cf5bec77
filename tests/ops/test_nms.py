from __future__ import annotations

import math

import pytest
import torch
import torchvision
from _reference import DEVICES, random_boxes_xyxy, reference_greedy_nms, ultralytics

from inferstream.ops import nms as nms_module
from inferstream.ops.nms import by_image_then_score, nms_cxcywhr, nms_xyxy, probiou_cxcywhr, rank_in_image


def _per_group_reference(boxes, scores, labels, image_ids, iou, agnostic=False):  # type: ignore[no-untyped-def]
    """Loop over (image, class) groups with the plain greedy NMS; kept indices by image then score."""
    kept = []
    for img in sorted(set(image_ids.tolist())):
        in_img = image_ids == img
        groups = [None] if agnostic else sorted(set(labels[in_img].tolist()))
        keep_img = []
        for c in groups:
            idx = torch.nonzero(in_img & ((labels == c) if c is not None else True)).flatten()
            keep_img += idx[reference_greedy_nms(boxes[idx], scores[idx], iou)].tolist()
        kept += sorted(keep_img, key=lambda i: -float(scores[i]))
    return torch.tensor(kept, dtype=torch.int64)


def _random_cxcywhr(n: int, n_images: int, n_classes: int, seed: int) -> tuple[torch.Tensor, ...]:
    boxes, scores, labels, image_ids = random_boxes_xyxy(n, n_images, n_classes, seed)
    g = torch.Generator().manual_seed(seed + 100)
    ctr, wh = (boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2]
    angle = (torch.rand(n, 1, generator=g) - 0.25) * math.pi
    return torch.cat((ctr, wh, angle), 1), scores, labels, image_ids


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("iou", [0.3, 0.5, 0.7])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("agnostic", [False, True])
def test_nms_xyxy_matches_reference_loop(device: str, iou: float, seed: int, agnostic: bool) -> None:
    boxes, scores, labels, image_ids = random_boxes_xyxy(300, 3, 4, seed)
    expected = _per_group_reference(boxes, scores, labels, image_ids, iou, agnostic)
    args = (t.to(device) for t in (boxes, scores, labels, image_ids))
    torch.testing.assert_close(nms_xyxy(*args, iou, agnostic).cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("agnostic", [False, True])
def test_nms_xyxy_runs_image_by_image_above_one_call_max(monkeypatch: pytest.MonkeyPatch, agnostic: bool,
                                                         device: str) -> None:
    inputs = [t.to(device) for t in random_boxes_xyxy(300, 3, 4, seed=11)]
    expected = nms_xyxy(*inputs, 0.5, agnostic)
    monkeypatch.setattr(nms_module, "ONE_CALL_MAX", {"cpu": 50, "cuda": 50})
    assert nms_xyxy(*inputs, 0.5, agnostic).tolist() == expected.tolist()


def test_nms_xyxy_keeps_the_same_set_as_torchvision_batched_nms() -> None:
    boxes, scores, labels, image_ids = random_boxes_xyxy(500, 4, 10, seed=7)
    ours = nms_xyxy(boxes, scores, labels, image_ids, 0.5)
    ref = torchvision.ops.batched_nms(boxes, scores, image_ids * 10 + labels, 0.5)
    assert sorted(ours.tolist()) == sorted(ref.tolist())


def test_nms_xyxy_orders_by_image_then_descending_score() -> None:
    boxes, scores, labels, image_ids = random_boxes_xyxy(200, 3, 2, seed=3)
    keep = nms_xyxy(boxes, scores, labels, image_ids, 0.5)
    key = [(int(image_ids[i]), -float(scores[i])) for i in keep]
    assert key == sorted(key)


def test_nms_xyxy_keeps_far_apart_classes_separate_at_large_coordinates() -> None:
    # identical boxes of two classes never suppress each other, even with coordinates far from the origin
    boxes = torch.tensor([[7000.0, 7000.0, 7010.0, 7010.0]] * 2)
    keep = nms_xyxy(boxes, torch.tensor([0.9, 0.8]), torch.tensor([0, 79]), torch.tensor([0, 0]), 0.5)
    assert keep.tolist() == [0, 1]


def test_nms_xyxy_returns_nothing_for_no_boxes() -> None:
    keep = nms_xyxy(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.int64),
                    torch.zeros(0, dtype=torch.int64), 0.5)  # fmt: skip
    assert keep.shape == (0,) and keep.dtype == torch.int64


def test_probiou_cxcywhr_matches_ultralytics_batch_probiou() -> None:
    ultralytics()
    from ultralytics.utils.metrics import batch_probiou

    a, *_ = _random_cxcywhr(40, 1, 1, seed=0)
    b, *_ = _random_cxcywhr(30, 1, 1, seed=1)
    torch.testing.assert_close(probiou_cxcywhr(a, b), batch_probiou(a, b), rtol=0, atol=1e-5)


@pytest.mark.parametrize("iou", [0.3, 0.7])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("agnostic", [False, True])
def test_nms_cxcywhr_matches_ultralytics_fast_nms(iou: float, seed: int, agnostic: bool) -> None:
    ultralytics()
    from ultralytics.utils.metrics import batch_probiou
    from ultralytics.utils.nms import TorchNMS

    boxes, scores, labels, image_ids = _random_cxcywhr(300, 3, 4, seed)
    expected = []
    for img in range(3):  # what non_max_suppression(rotated=True) does per image: class offset + Fast-NMS
        idx = torch.nonzero(image_ids == img).flatten()
        offset = labels[idx, None].float() * (0 if agnostic else 7680)
        b = torch.cat((boxes[idx, :2] + offset, boxes[idx, 2:]), 1)
        expected += idx[TorchNMS.fast_nms(b, scores[idx], iou, iou_func=batch_probiou)].tolist()
    assert nms_cxcywhr(boxes, scores, labels, image_ids, iou, agnostic).tolist() == expected


@pytest.mark.parametrize("device", DEVICES)
def test_nms_cxcywhr_keeps_the_same_boxes_on_every_device(device: str) -> None:
    inputs = _random_cxcywhr(400, 4, 3, seed=5)
    expected = nms_cxcywhr(*inputs, 0.5)
    assert 0 < len(expected) < 400
    assert nms_cxcywhr(*(t.to(device) for t in inputs), 0.5).cpu().tolist() == expected.tolist()


def test_nms_cxcywhr_gives_the_same_result_in_row_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _random_cxcywhr(400, 4, 3, seed=6)
    expected = nms_cxcywhr(*inputs, 0.4)
    monkeypatch.setattr(nms_module, "PAIRS_PER_BLOCK", 1000)  # several rows, then a single row per block
    assert nms_cxcywhr(*inputs, 0.4).tolist() == expected.tolist()
    monkeypatch.setattr(nms_module, "PAIRS_PER_BLOCK", 1)
    assert nms_cxcywhr(*inputs, 0.4).tolist() == expected.tolist()


def test_nms_cxcywhr_returns_nothing_for_no_boxes() -> None:
    keep = nms_cxcywhr(torch.zeros(0, 5), torch.zeros(0), torch.zeros(0, dtype=torch.int64),
                       torch.zeros(0, dtype=torch.int64), 0.5)  # fmt: skip
    assert keep.shape == (0,) and keep.dtype == torch.int64


def test_by_image_then_score_and_rank_in_image() -> None:
    scores = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.3])
    image_ids = torch.tensor([1, 0, 1, 1, 0])
    order = by_image_then_score(scores, image_ids)
    assert order.tolist() == [1, 4, 3, 2, 0]
    assert rank_in_image(image_ids[order]).tolist() == [0, 1, 0, 1, 2]


@pytest.mark.parametrize(("fn", "width"), [(nms_xyxy, 4), (nms_cxcywhr, 5)])
def test_nms_rejects_boxes_of_the_wrong_width(fn, width: int) -> None:  # type: ignore[no-untyped-def]
    i64 = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match=rf"boxes: expected a float Tensor\[N, {width}\], got torch.float32 \(3, 6\)"):
        fn(torch.zeros(3, 6), torch.zeros(3), i64, i64, 0.5)


@pytest.mark.parametrize("fn", [nms_xyxy, nms_cxcywhr])
def test_nms_rejects_mismatched_columns(fn) -> None:  # type: ignore[no-untyped-def]
    width = 4 if fn is nms_xyxy else 5
    boxes, i64 = torch.zeros(3, width), torch.zeros(3, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"scores: expected a float Tensor\[3\], got torch.float32 \(2,\)"):
        fn(boxes, torch.zeros(2), i64, i64, 0.5)
    with pytest.raises(ValueError, match=r"labels: expected a int64 Tensor\[3\], got torch.int32 \(3,\)"):
        fn(boxes, torch.zeros(3), i64.int(), i64, 0.5)
    with pytest.raises(ValueError, match=r"image_ids: expected a int64 Tensor\[3\], got torch.float32 \(3,\)"):
        fn(boxes, torch.zeros(3), i64, i64.float(), 0.5)
