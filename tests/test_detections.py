"""detections.Detections: merge and split are inverses, and split keeps every field (the batch's detections are
split per frame after their single copy to the host)."""
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
