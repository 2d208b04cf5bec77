"""The synthetic scene generator the tracking tests and bench rely on."""
from __future__ import annotations

import numpy as np

from .scenes import SceneConfig, make_scene


def test_make_scene_is_seeded() -> None:
    cfg = SceneConfig(n_objects=5, n_frames=40)
    a, b, c = make_scene(1, cfg), make_scene(1, cfg), make_scene(2, cfg)
    for fa, fb in zip(a.frames, b.frames):
        np.testing.assert_array_equal(fa.gt_boxes, fb.gt_boxes)
        assert fa.detections.boxes_xyxy.equal(fb.detections.boxes_xyxy)
    assert not all(np.array_equal(fa.gt_boxes, fc.gt_boxes) for fa, fc in zip(a.frames, c.frames))


def test_make_scene_has_the_promised_nuisances() -> None:
    scene = make_scene(0, SceneConfig(n_objects=10, n_frames=200))
    true = np.concatenate([f.det_gt_ids >= 0 for f in scene.frames])
    scores = np.concatenate([f.detections.scores.numpy() for f in scene.frames])
    n_gt = sum(len(f.gt_ids) for f in scene.frames)
    assert 0.7 * n_gt < true.sum() < n_gt  # missed detections
    assert (~true).sum() > 100  # false positives
    assert ((scores < 0.5) & true).sum() > 50  # true detections with low scores, for ByteTrack's second stage
    pts = [f.pts_ns for f in scene.frames]
    assert pts[1] - pts[0] == round(1e9 / 30)


def test_make_scene_oriented_gives_angles() -> None:
    scene = make_scene(0, SceneConfig(n_objects=3, n_frames=5, oriented=True))
    frame = scene.frames[0]
    assert frame.detections.angles_rad is not None and frame.gt_angles is not None
    assert len(frame.detections.angles_rad) == len(frame.detections)
