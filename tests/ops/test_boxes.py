from __future__ import annotations

import math

import pytest
import torch
from _reference import ultralytics

from inferstream.ops.boxes import (
    cxcywh_to_xyxy,
    cxcywhr_to_corners,
    cxcywhr_to_envelope_xyxy,
    xyxy_to_cxcywh,
    xyxy_to_xywh,
)


def _random_cxcywhr(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ctr = torch.rand(n, 2, generator=g) * 600
    wh = torch.rand(n, 2, generator=g) * 100 + 1
    r = (torch.rand(n, 1, generator=g) - 0.25) * math.pi
    return torch.cat((ctr, wh, r), 1)


def test_cxcywh_to_xyxy_matches_ultralytics() -> None:
    ultralytics()
    from ultralytics.utils.ops import xywh2xyxy

    boxes = _random_cxcywhr(50)[:, :4]
    torch.testing.assert_close(cxcywh_to_xyxy(boxes), xywh2xyxy(boxes.clone()))


def test_xyxy_to_cxcywh_inverts_cxcywh_to_xyxy() -> None:
    boxes = _random_cxcywhr(50)[:, :4]
    torch.testing.assert_close(xyxy_to_cxcywh(cxcywh_to_xyxy(boxes)), boxes, rtol=0, atol=1e-4)


def test_xyxy_to_xywh_gives_top_left_and_size() -> None:
    boxes = torch.tensor([[10.0, 20.0, 110.0, 70.0]])
    assert xyxy_to_xywh(boxes).tolist() == [[10.0, 20.0, 100.0, 50.0]]


def test_conversions_keep_leading_dims_and_dtype() -> None:
    boxes = torch.rand(2, 3, 4, dtype=torch.float64)
    out = cxcywh_to_xyxy(boxes)
    assert out.shape == (2, 3, 4) and out.dtype == torch.float64


def test_cxcywhr_to_corners_matches_ultralytics() -> None:
    ultralytics()
    from ultralytics.utils.ops import xywhr2xyxyxyxy

    boxes = _random_cxcywhr(50)
    torch.testing.assert_close(cxcywhr_to_corners(boxes), xywhr2xyxyxyxy(boxes.clone()))


def test_cxcywhr_to_envelope_xyxy_encloses_corners_exactly() -> None:
    boxes = _random_cxcywhr(50)
    corners = cxcywhr_to_corners(boxes)
    expected = torch.cat((corners.amin(dim=1), corners.amax(dim=1)), dim=1)
    torch.testing.assert_close(cxcywhr_to_envelope_xyxy(boxes), expected)


def test_cxcywhr_to_envelope_xyxy_matches_gstanalytics_golden_vector() -> None:
    # gst-python testsuite/test_analytics.py: add_oriented_od_mtd(qk, 600, 400, 200, 100, 0.785, ...) reads back
    # an envelope at (594, 344) of size 212 x 212; (600, 400) is the pre-rotation top-left corner.
    box = torch.tensor([[700.0, 450.0, 200.0, 100.0, 0.785]])
    x1, y1, x2, y2 = cxcywhr_to_envelope_xyxy(box)[0].tolist()
    assert (round(x1), round(y1), round(x2 - x1), round(y2 - y1)) == (594, 344, 212, 212)


@pytest.mark.parametrize(
    ("fn", "width"),
    [(cxcywh_to_xyxy, 4), (xyxy_to_cxcywh, 4), (xyxy_to_xywh, 4), (cxcywhr_to_corners, 5),
     (cxcywhr_to_envelope_xyxy, 5)],
)  # fmt: skip
def test_box_conversion_rejects_wrong_width_or_dtype(fn, width: int) -> None:  # type: ignore[no-untyped-def]
    message = rf"boxes: expected a float Tensor\[\.\.\., {width}\], got torch.float32 \(3, 6\)"
    with pytest.raises(ValueError, match=message):
        fn(torch.zeros(3, 6))
    with pytest.raises(ValueError, match=r"got torch.int64"):
        fn(torch.zeros(3, width, dtype=torch.int64))
