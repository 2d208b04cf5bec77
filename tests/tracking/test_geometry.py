"""tracking/geometry.py (IoU) and the box conversions the trackers use (ops/boxes.py) against per-pair references and
upstream golden vectors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from inferstream.ops.boxes import cxcywh_to_xyxy, rotated_envelope_xyxy, xyxy_to_cxcywh
from inferstream.tracking.geometry import iou_matrix_xyxy, slack_iou_matrix


def random_boxes(rng: np.random.Generator, n: int) -> np.ndarray:
    xy = rng.uniform(0, 200, (n, 2))
    wh = rng.uniform(1, 80, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1)


def reference_iou(a: np.ndarray, b: np.ndarray) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@pytest.mark.parametrize("seed", range(5))
def test_iou_matrix_xyxy_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = random_boxes(rng, 7), random_boxes(rng, 5)
    expected = np.array([[reference_iou(x, y) for y in b] for x in a])
    np.testing.assert_allclose(iou_matrix_xyxy(a, b), expected, atol=1e-12)


def test_iou_matrix_xyxy_handles_empty_and_degenerate_boxes() -> None:
    assert iou_matrix_xyxy(np.zeros((0, 4)), random_boxes(np.random.default_rng(0), 3)).shape == (0, 3)
    point = np.array([[5.0, 5.0, 5.0, 5.0]])
    assert iou_matrix_xyxy(point, point)[0, 0] == 0.0


def test_envelope_xyxy_matches_gstanalytics_golden_vector() -> None:
    # gst-python testsuite/test_analytics.py: oriented (600, 400, 200, 100, 0.785) -> envelope x=594, y=344
    env = rotated_envelope_xyxy(np.array([[600.0, 400.0, 800.0, 500.0]]), np.array([0.785]))[0]
    assert (round(env[0]), round(env[1])) == (594, 344)
    assert (round(env[2] - env[0]), round(env[3] - env[1])) == (212, 212)


def test_envelope_xyxy_is_identity_without_angles_and_swaps_at_right_angle() -> None:
    boxes = np.array([[10.0, 20.0, 50.0, 30.0]])
    np.testing.assert_array_equal(rotated_envelope_xyxy(boxes, None), boxes)
    np.testing.assert_allclose(rotated_envelope_xyxy(boxes, np.array([math.pi / 2])), [[25.0, 5.0, 35.0, 45.0]])


@pytest.mark.parametrize("seed", range(3))
def test_slack_iou_matrix_with_zero_slack_is_iou(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = random_boxes(rng, 6), random_boxes(rng, 4)
    got = slack_iou_matrix(xyxy_to_cxcywh(a), np.zeros((6, 2)), xyxy_to_cxcywh(b))
    np.testing.assert_allclose(got, iou_matrix_xyxy(a, b), atol=1e-12)


def test_slack_iou_matrix_moves_boxes_by_at_most_their_slack() -> None:
    track = np.array([[100.0, 100.0, 20.0, 40.0]])
    far = np.array([[150.0, 100.0, 20.0, 40.0]])  # 50 px to the right
    assert slack_iou_matrix(track, np.array([[50.0, 0.0]]), far)[0, 0] == pytest.approx(1.0)
    assert slack_iou_matrix(track, np.array([[40.0, 0.0]]), far)[0, 0] == pytest.approx(10 / 30)  # 10 px short
    assert slack_iou_matrix(track, np.array([[0.0, 50.0]]), far)[0, 0] == 0.0  # slack along the wrong axis


def test_box_conversions_round_trip() -> None:
    boxes = random_boxes(np.random.default_rng(1), 9)
    np.testing.assert_allclose(cxcywh_to_xyxy(xyxy_to_cxcywh(boxes)), boxes)
