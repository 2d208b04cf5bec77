from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _reference import ultralytics

from inferstream.ops.boxes import (
    cxcywh_to_xyxy,
    cxcywhr_to_corners,
    rotated_envelope_xyxy,
    xyxy_to_cxcywh,
    xyxy_to_xywh,
)


def cxcywhr_to_envelope_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    """The envelope of ``cxcywhr`` boxes through the one envelope function (it takes Detections' xyxy + angle)."""
    return rotated_envelope_xyxy(cxcywh_to_xyxy(boxes[:, :4]), boxes[:, 4])


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
    boxes = _random_cxcywhr(50).double()  # the helper goes through xyxy: no float32 rounding on the way
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
    [(cxcywh_to_xyxy, 4), (xyxy_to_cxcywh, 4), (cxcywhr_to_corners, 5),
     (lambda b: rotated_envelope_xyxy(b, None), 4)],
)  # fmt: skip
def test_box_conversion_rejects_wrong_width_or_dtype(fn, width: int) -> None:  # type: ignore[no-untyped-def]
    message = rf"boxes: expected a float array\[\.\.\., {width}\], got torch.float32 \(3, 6\)"
    with pytest.raises(ValueError, match=message):
        fn(torch.zeros(3, 6))
    with pytest.raises(ValueError, match=r"got torch.int64"):
        fn(torch.zeros(3, width, dtype=torch.int64))


def test_xyxy_to_xywh_takes_integer_edges_and_refuses_a_wrong_width() -> None:
    edges = np.array([[10, 20, 110, 70]], dtype=np.int32)
    out = xyxy_to_xywh(edges)
    assert out.dtype == np.int32 and out.tolist() == [[10, 20, 100, 50]]
    with pytest.raises(ValueError, match=r"expected a float array\[\.\.\., 4\], got numpy.int32 \(1, 5\)"):
        xyxy_to_xywh(np.zeros((1, 5), dtype=np.int32))


def test_numpy_boxes_give_what_torch_gives() -> None:
    """One function per conversion for both libraries: the host arrays (trackers, metadata, drawing) and the
    decoders' tensors get the same boxes (numpy's centre/size <-> corners is a matrix product: exact here)."""
    boxes = _random_cxcywhr(50).double()
    host = boxes.numpy()
    for fn, x in ((cxcywh_to_xyxy, boxes[:, :4]), (xyxy_to_cxcywh, boxes[:, :4]), (xyxy_to_xywh, boxes[:, :4]),
                  (cxcywhr_to_corners, boxes)):
        ours = fn(x.numpy())
        assert isinstance(ours, np.ndarray) and ours.dtype == np.float64
        np.testing.assert_array_equal(ours, fn(x).numpy())
    xyxy = cxcywh_to_xyxy(host[:, :4])
    np.testing.assert_allclose(rotated_envelope_xyxy(xyxy, host[:, 4]),
                               rotated_envelope_xyxy(torch.from_numpy(xyxy), boxes[:, 4]).numpy(), rtol=0, atol=1e-9)
    assert rotated_envelope_xyxy(xyxy, None) is not xyxy  # a copy, never the caller's array
