"""detections.Detections: merge and split are inverses, and split keeps every field (the batch's detections are
split per frame after their single copy to the host); the validators refuse each malformed field by name."""
from __future__ import annotations

import pytest
import torch

from inferstream.detections import Detections


def _dets(n: int, offset: float, oriented: bool, tracked: bool) -> Detections:
    xy = torch.arange(2 * n, dtype=torch.float32).view(n, 2) + offset
    return Detections(boxes_xyxy=torch.cat([xy, xy + 5], 1), scores=torch.full((n,), 0.5 + offset / 100),
                      labels=torch.arange(n), angles_rad=torch.full((n,), offset) if oriented else None,
                      track_ids=torch.arange(n) + int(offset) if tracked else None)


@pytest.mark.parametrize(("oriented", "tracked"), [(False, False), (True, True)])
def test_split_undoes_merge_including_empty_frames(oriented: bool, tracked: bool) -> None:
    parts = [_dets(n, 10.0 * i, oriented, tracked) for i, n in enumerate([3, 0, 1, 0, 4])]
    back = Detections.merge(parts).split([len(p) for p in parts])
    assert len(back) == len(parts)
    for got, want in zip(back, parts):
        for name in ("boxes_xyxy", "scores", "labels", "angles_rad", "track_ids"):
            a, b = getattr(got, name), getattr(want, name)
            assert (a is None and b is None) or torch.equal(a, b), name


def test_split_needs_counts_that_cover_every_row() -> None:
    with pytest.raises(RuntimeError):
        _dets(4, 0.0, False, False).split([1, 2])


def test_masks_and_keypoints_follow_their_rows() -> None:
    """Row selection, split and merge keep each mask crop and keypoint set with its box; bad shapes are refused."""
    masks = tuple(torch.full((i + 1, i + 2), i, dtype=torch.uint8) for i in range(3))
    kpts = torch.arange(3 * 17 * 3, dtype=torch.float32).reshape(3, 17, 3)
    d = Detections(boxes_xyxy=torch.tensor([[0.0, 0, 2, 1], [0, 0, 3, 2], [0, 0, 4, 3]]), scores=torch.ones(3),
                   labels=torch.arange(3), masks=masks, keypoints=kpts)
    picked = d[torch.tensor([False, True, True])]
    assert [int(m[0, 0]) for m in picked.masks] == [1, 2] and torch.equal(picked.keypoints, kpts[1:])
    first, rest = d.split([1, 2])
    assert first.masks == masks[:1] and rest.masks == masks[1:]
    merged = Detections.merge([rest, first])
    assert [int(m[0, 0]) for m in merged.masks] == [1, 2, 0] and torch.equal(merged.keypoints[2], kpts[0])
    with pytest.raises(ValueError, match="masks: expected a tuple of 3 crops"):
        Detections(boxes_xyxy=d.boxes_xyxy, scores=d.scores, labels=d.labels, masks=masks[:2])
    with pytest.raises(ValueError, match="keypoints"):
        Detections(boxes_xyxy=d.boxes_xyxy, scores=d.scores, labels=d.labels, keypoints=kpts[:, :, :2])


def _fields(n: int = 2, **change: object) -> dict[str, object]:
    good: dict[str, object] = {"boxes_xyxy": torch.zeros((n, 4)), "scores": torch.zeros(n),
                               "labels": torch.zeros(n, dtype=torch.int64)}
    return {**good, **change}


@pytest.mark.parametrize(("change", "message"), [
    ({}, None),
    ({"angles_rad": torch.zeros(2), "track_ids": torch.full((2,), -1), "keypoints": torch.zeros((2, 17, 3)),
      "masks": (torch.zeros((3, 4), dtype=torch.uint8), torch.zeros((1, 1), dtype=torch.uint8))}, None),
    ({"boxes_xyxy": torch.zeros((2, 4), dtype=torch.float64)}, r"boxes_xyxy: expected torch.float32 \(2, 4\), got"),
    ({"boxes_xyxy": torch.zeros((2, 5))}, r"boxes_xyxy: expected torch.float32 \(2, 4\), got torch.float32 \(2, 5\)"),
    ({"boxes_xyxy": torch.zeros(8)}, r"boxes_xyxy: expected torch.float32 \(-1, 4\), got torch.float32 \(8,\)"),
    ({"scores": torch.zeros(3)}, r"scores: expected torch.float32 \(2,\), got torch.float32 \(3,\)"),
    ({"labels": torch.zeros(2, dtype=torch.int32)}, r"labels: expected torch.int64 \(2,\), got torch.int32 \(2,\)"),
    ({"angles_rad": torch.zeros((2, 1))}, r"angles_rad: expected torch.float32 \(2,\), got torch.float32 \(2, 1\)"),
    ({"track_ids": torch.zeros(2)}, r"track_ids: expected torch.int64 \(2,\), got torch.float32 \(2,\)"),
    ({"keypoints": torch.zeros((2, 17, 2))}, r"keypoints: expected torch.float32 \(2, None, 3\), got"),
    ({"keypoints": torch.zeros((1, 17, 3))}, r"keypoints: expected torch.float32 \(2, None, 3\), got"),
    ({"masks": [torch.zeros((1, 1), dtype=torch.uint8)] * 2}, r"masks: expected a tuple of 2 crops, got list"),
    ({"masks": (torch.zeros((1, 1), dtype=torch.uint8), torch.zeros((1, 1)))},
     r"masks\[1\]: expected torch.uint8 \(None, None\), got torch.float32 \(1, 1\)"),
    ({"masks": (torch.zeros((1, 1, 1), dtype=torch.uint8),) * 2}, r"masks\[0\]: expected torch.uint8 \(None, None\)"),
    ({"scores": torch.zeros(2, device="meta")}, r"all fields must share one device, got \['cpu', 'meta'\]"),
])
def test_validators_name_the_field_and_both_shapes(change: dict[str, object], message: str | None) -> None:
    """Every field is checked for dtype and shape against N (the boxes' rows); the error names what was expected
    and what came, as supervision's validators do."""
    if message is None:
        assert len(Detections(**_fields(**change))) == 2
    else:
        with pytest.raises(ValueError, match=message):
            Detections(**_fields(**change))


def test_empty_detections_validate_and_with_track_ids_checks_its_input() -> None:
    assert len(Detections(**_fields(0))) == 0
    assert Detections.empty(oriented=True).angles_rad is not None
    d = Detections(**_fields(2))
    assert d.with_track_ids(torch.tensor([4, -1])).track_ids.tolist() == [4, -1]
    with pytest.raises(ValueError, match=r"track_ids: expected torch.int64 \(2,\), got torch.int64 \(3,\)"):
        d.with_track_ids(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="track_ids on meta, detections on cpu"):
        d.with_track_ids(torch.zeros(2, dtype=torch.int64, device="meta"))
