"""The synthetic scene generator the tracking tests and bench rely on."""
from __future__ import annotations

import numpy as np

from inferstream.tracking.geometry import iou_matrix_xyxy

from .scenes import BounceConfig, SceneConfig, make_bounce_scene, make_scene


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


def test_make_bounce_scene_is_seeded_and_has_the_hard_cases() -> None:
    cfg = BounceConfig(n_frames=240)
    a, b = make_bounce_scene(1, cfg), make_bounce_scene(1, cfg)
    assert all(fa.detections.boxes_xyxy.equal(fb.detections.boxes_xyxy) for fa, fb in zip(a.frames, b.frames))
    gt = np.stack([f.gt_boxes for f in a.frames])  # [F, K, 4]: every object on every frame
    assert (gt[..., :2] >= 0).all() and (gt[..., 2] <= cfg.width).all() and (gt[..., 3] <= cfg.height).all()
    velocity = np.diff((gt[..., :2] + gt[..., 2:]) / 2, axis=0)
    assert (np.sign(velocity[1:]) != np.sign(velocity[:-1])).any(axis=2).sum() >= 10  # bounces off the edges
    found = np.concatenate([f.det_gt_ids for f in a.frames])
    n_gt = len(a.frames) * cfg.n_objects
    assert 0.8 * n_gt < (found >= 0).sum() < 0.93 * n_gt  # random misses and occlusion drops
    covered = 0
    for f in a.frames:  # a box is dropped whenever a bigger one covers it by IoU > 0.5
        iou, area = iou_matrix_xyxy(f.gt_boxes, f.gt_boxes), np.prod(f.gt_boxes[:, 2:] - f.gt_boxes[:, :2], axis=1)
        hidden = ((iou > cfg.occlusion_iou) & (area[None, :] > area[:, None])).any(axis=1).nonzero()[0]
        assert not set(hidden.tolist()) & set(f.det_gt_ids.tolist())
        covered += len(hidden)
    assert covered > 0
    fp_scores = np.concatenate([f.detections.scores.numpy()[f.det_gt_ids < 0] for f in a.frames])
    assert 0.3 * len(a.frames) < len(fp_scores) < 0.7 * len(a.frames) and (fp_scores < 0.4).all()
