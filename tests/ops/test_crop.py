"""ops.crop against the obvious reference: slice the box out, then torch's bilinear resize (what torchvision's
``F.resize(antialias=False)`` runs) on that crop alone."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inferstream.ops.crop import crop_resize, pixel_boxes


def _reference(image: torch.Tensor, box: list[int], size: tuple[int, int]) -> torch.Tensor:
    x1, y1, x2, y2 = box
    crop = image[y1:y2, x1:x2].permute(2, 0, 1)[None].float()
    return F.interpolate(crop, size=size, mode="bilinear", align_corners=False)[0] / 255


@pytest.mark.parametrize("size", [(64, 64), (17, 40), (224, 96)])
@pytest.mark.parametrize("seed", range(3))
def test_crop_resize_matches_slicing_then_resizing(size: tuple[int, int], seed: int) -> None:
    """Down- and up-scaling, boxes on the frame's edges, two frames of different sizes in one call."""
    g = torch.Generator().manual_seed(seed)
    images = [torch.randint(0, 256, (90, 120, 3), generator=g, dtype=torch.uint8),
              torch.randint(0, 256, (70, 50, 3), generator=g, dtype=torch.uint8)]
    boxes, ids = [], []
    for _ in range(12):
        b = int(torch.randint(0, 2, (1,), generator=g))
        h, w = images[b].shape[:2]
        x1, y1 = int(torch.randint(0, w - 1, (1,), generator=g)), int(torch.randint(0, h - 1, (1,), generator=g))
        x2 = int(torch.randint(x1 + 1, w + 1, (1,), generator=g))
        y2 = int(torch.randint(y1 + 1, h + 1, (1,), generator=g))
        boxes.append([x1, y1, x2, y2])
        ids.append(b)
    boxes += [[0, 0, 120, 90], [119, 89, 120, 90]]  # the whole frame, its last pixel
    ids += [0, 0]
    out = crop_resize(images, torch.tensor(boxes), torch.tensor(ids), size)
    assert out.shape == (len(boxes), 3, *size)
    expected = torch.stack([_reference(images[b], box, size) for box, b in zip(boxes, ids)])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


def test_pixel_boxes_round_clip_and_keep_one_pixel() -> None:
    boxes = torch.tensor([[-5.0, 2.4, 30.6, 50.0], [99.7, 10.0, 140.0, 10.2], [10.0, 10.0, 10.0, 10.0]])
    assert pixel_boxes(boxes, 40, 100).tolist() == [[0, 2, 31, 40], [99, 10, 100, 11], [10, 10, 11, 11]]


def test_crop_resize_rejects_bad_boxes() -> None:
    image = torch.zeros((8, 8, 3), dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"boxes \(2, 3\)"):
        crop_resize([image], torch.zeros((2, 3), dtype=torch.int64), torch.zeros(2, dtype=torch.int64), (4, 4))
    with pytest.raises(ValueError, match="at least one image"):
        crop_resize([], torch.zeros((0, 4), dtype=torch.int64), torch.zeros(0, dtype=torch.int64), (4, 4))
