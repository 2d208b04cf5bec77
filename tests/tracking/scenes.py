"""Synthetic tracking scenes with exact ground truth, for tests and bench/tracking_compare.py.

Two generators. ``make_scene``: objects move in a frame with constant speed and piecewise-constant turn rates, steer away from the borders,
grow towards the bottom of the frame (perspective) and occlude each other (lower in the frame = closer).
A simulated detector sees them with box jitter, random and burst dropouts, low scores when partly occluded
(and now and then for no reason, which ByteTrack's second stage is for), and false positives. Seeded:
the same config and seed give the same scene.

``make_bounce_scene`` (``BounceConfig``): the hard case of issue 15. Boxes move straight and bounce off the frame
edges, so their paths cross often; a box is not detected while a bigger box covers it (IoU above a threshold),
and is missed at random besides; detected edges jitter by a few pixels; every object changes speed and size
over time; some frames carry a low-score false positive. Trackers that keep a second track alive next to an
object's first one after a crossing or a miss lose IDF1 and gather id switches here.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from inferstream.detections import Detections
from inferstream.tracking.geometry import iou_matrix_xyxy

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class SceneConfig:
    """Scene knobs. Sizes in pixels, speeds in pixels per second, probabilities per detection."""

    n_objects: int = 8
    n_frames: int = 300
    fps: float = 30.0
    width: int = 1280
    height: int = 720
    height_range: tuple[float, float] = (40.0, 160.0)  # object height at mid-frame
    aspect_range: tuple[float, float] = (0.35, 1.2)  # width / height
    speed_range: tuple[float, float] = (40.0, 220.0)
    turn_std: float = 0.8  # rad/s of a random turn
    turn_changes_per_s: float = 0.5
    late_fraction: float = 0.25  # objects that appear or vanish mid-scene
    dropout: float = 0.06  # random miss of a visible object
    burst_per_s: float = 0.08  # rate of multi-frame misses (3 to 12 frames) per object
    jitter: float = 0.03  # std of each box edge, fraction of the box size
    low_score_fraction: float = 0.08  # fully visible objects that score low anyway
    fp_per_frame: float = 1.0  # mean number of false positives per frame
    oriented: bool = False
    n_classes: int = 1
    label_flip: float = 0.02  # probability a detection carries a wrong label (n_classes > 1)


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: ground truth and what the simulated detector reported."""

    pts_ns: int
    gt_ids: IntArray  # [G]
    gt_boxes: FloatArray  # [G, 4] xyxy (unrotated box when oriented)
    gt_angles: FloatArray | None  # [G] radians, oriented scenes only
    detections: Detections
    det_gt_ids: IntArray  # [N] the ground-truth id each detection came from, -1 for false positives


@dataclass(frozen=True, slots=True)
class BounceConfig:
    """Knobs of ``make_bounce_scene``. Sizes in pixels, speeds in pixels per frame, probabilities per frame."""

    n_objects: int = 8
    n_frames: int = 240
    fps: float = 30.0
    width: int = 640
    height: int = 480
    size_range: tuple[float, float] = (30.0, 90.0)  # box height
    aspect_range: tuple[float, float] = (0.5, 1.5)  # width / height
    speed_range: tuple[float, float] = (1.5, 4.0)  # px per frame
    speed_change: float = 0.3  # each object's speed swings by up to this fraction (slow sinusoid)
    size_change: float = 0.2  # and its size by up to this fraction
    jitter_px: float = 2.0  # each detected edge moves by up to this, uniform
    miss: float = 0.08  # random miss of a visible object
    occlusion_iou: float = 0.5  # a box overlapping a bigger one by more than this is not detected
    score_range: tuple[float, float] = (0.55, 0.95)
    fp_fraction: float = 0.5  # frames with one false positive
    fp_score_range: tuple[float, float] = (0.15, 0.4)


BOUNCE_SUITE: dict[str, BounceConfig] = {  # issue 15's scene, then harder variants of it
    "issue": BounceConfig(),
    "small boxes": BounceConfig(size_range=(16.0, 40.0)),
    "crowd": BounceConfig(n_objects=14, size_range=(24.0, 70.0)),
    "fast": BounceConfig(speed_range=(3.0, 7.0), size_range=(20.0, 60.0)),
    "10 fps": BounceConfig(fps=10.0, n_frames=120, speed_range=(4.5, 12.0)),
    "small frame": BounceConfig(width=400, height=300, size_range=(24.0, 60.0)),
}


@dataclass(frozen=True, slots=True)
class Scene:
    config: SceneConfig | BounceConfig
    seed: int
    frames: tuple[Frame, ...]


def _trajectories(cfg: SceneConfig, rng: np.random.Generator) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Centres [T, K, 2], (w, h) [T, K, 2] and alive mask [T, K]."""
    k, n, dt = cfg.n_objects, cfg.n_frames, 1.0 / cfg.fps
    w_img, h_img = cfg.width, cfg.height
    pos = rng.uniform([0.1 * w_img, 0.1 * h_img], [0.9 * w_img, 0.9 * h_img], size=(k, 2))
    heading = rng.uniform(-np.pi, np.pi, k)
    speed = rng.uniform(*cfg.speed_range, k)
    turn = np.zeros(k)
    base_h = rng.uniform(*cfg.height_range, k)
    aspect = rng.uniform(*cfg.aspect_range, k)
    start, stop = np.zeros(k, dtype=int), np.full(k, n, dtype=int)
    late = rng.random(k) < cfg.late_fraction
    start[late] = rng.integers(0, n // 2, late.sum())
    stop[late] = np.minimum(n, start[late] + rng.integers(n // 3, n, late.sum()))
    centres, sizes = np.zeros((n, k, 2)), np.zeros((n, k, 2))
    margin = 0.15 * np.array([w_img, h_img])
    for f in range(n):
        change = rng.random(k) < cfg.turn_changes_per_s * dt
        turn[change] = rng.normal(0.0, cfg.turn_std, change.sum()) * (rng.random(change.sum()) < 0.7)
        near = (pos < margin) | (pos > np.array([w_img, h_img]) - margin)
        if near.any():  # steer towards the centre, as a walker avoids a wall
            to_centre = np.arctan2(h_img / 2 - pos[:, 1], w_img / 2 - pos[:, 0])
            err = np.angle(np.exp(1j * (to_centre - heading)))
            steer = near.any(axis=1)
            turn[steer] = np.clip(1.5 * err[steer], -1.2, 1.2)
        heading += turn * dt
        pos += dt * speed[:, None] * np.stack([np.cos(heading), np.sin(heading)], axis=1)
        scale = 0.7 + 0.6 * pos[:, 1] / h_img
        centres[f] = pos
        sizes[f] = np.stack([base_h * aspect * scale, base_h * scale], axis=1)
    frames = np.arange(n)[:, None]
    alive = (frames >= start[None, :]) & (frames < stop[None, :])
    return centres, sizes, alive


def _visibility(boxes: FloatArray) -> FloatArray:
    """Visible fraction [G] of each box, occluded by boxes whose bottom edge is lower (closer to the camera)."""
    lt = np.maximum(boxes[:, None, :2], boxes[None, :, :2])
    rb = np.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    closer = boxes[None, :, 3] > boxes[:, None, 3]
    area = np.prod(boxes[:, 2:] - boxes[:, :2], axis=1)
    return np.clip(1.0 - (inter * closer).sum(axis=1) / area, 0.0, 1.0)


def make_scene(seed: int, config: SceneConfig | None = None) -> Scene:
    """Build a scene.

    Args:
        seed: random seed; the same (seed, config) gives the same scene.
        config: knobs, default ``SceneConfig()``.

    Returns:
        ``Scene`` whose frames carry pts at ``config.fps``, ground truth (objects at least half inside the frame,
        ids from 0) and the simulated detections (float32 boxes in frame pixels).
    """
    cfg = config if config is not None else SceneConfig()
    rng = np.random.default_rng(seed)
    centres, sizes, alive = _trajectories(cfg, rng)
    labels = rng.integers(0, cfg.n_classes, cfg.n_objects)
    angle0 = rng.uniform(-np.pi / 2, np.pi / 2, cfg.n_objects)
    burst_left = np.zeros(cfg.n_objects, dtype=int)
    frames = []
    for f in range(cfg.n_frames):
        boxes = np.concatenate([centres[f] - sizes[f] / 2, centres[f] + sizes[f] / 2], axis=1)
        clipped = np.clip(boxes, 0, [cfg.width, cfg.height, cfg.width, cfg.height])
        inside = np.prod(clipped[:, 2:] - clipped[:, :2], axis=1) / np.prod(sizes[f], axis=1)
        present = np.flatnonzero(alive[f] & (inside >= 0.5))
        angles = angle0 + 0.3 * np.sin(f / cfg.fps + angle0) if cfg.oriented else None
        burst_left = np.maximum(burst_left - 1, 0)
        new_burst = rng.random(cfg.n_objects) < cfg.burst_per_s / cfg.fps
        burst_left[new_burst & (burst_left == 0)] = rng.integers(3, 13, (new_burst & (burst_left == 0)).sum())
        det = _detect(cfg, rng, boxes[present], present, labels, angles, burst_left[present] > 0)
        frames.append(Frame(
            pts_ns=round(f * 1e9 / cfg.fps), gt_ids=present.astype(np.int64), gt_boxes=boxes[present],
            gt_angles=None if angles is None else angles[present], detections=det[0], det_gt_ids=det[1],
        ))
    return Scene(config=cfg, seed=seed, frames=tuple(frames))


def _detect(cfg: SceneConfig, rng: np.random.Generator, gt: FloatArray, ids: IntArray, labels: IntArray,
            angles: FloatArray | None, in_burst: npt.NDArray[np.bool_]) -> tuple[Detections, IntArray]:
    """The simulated detector on one frame's ground truth: true detections, then false positives."""
    vis = _visibility(gt) if len(gt) else np.zeros(0)
    p_detect = np.where(vis >= 0.5, 1.0 - cfg.dropout, np.where(vis >= 0.2, 0.6, 0.05))
    hit = (rng.random(len(gt)) < p_detect) & ~in_burst
    low = (vis < 0.6) | (rng.random(len(gt)) < cfg.low_score_fraction)
    score = np.where(low, rng.uniform(0.15, 0.5, len(gt)), np.clip(rng.normal(0.82, 0.08, len(gt)), 0.5, 0.99))
    wh = np.tile(gt[:, 2:] - gt[:, :2], 2)
    box = gt + rng.normal(0.0, cfg.jitter, gt.shape) * wh
    lab = labels[ids]
    flip = (rng.random(len(gt)) < cfg.label_flip) & (cfg.n_classes > 1)
    lab = np.where(flip, (lab + 1) % max(cfg.n_classes, 1), lab)
    ang = None if angles is None else angles[ids] + rng.normal(0.0, 0.03, len(gt))
    box, score, lab, src = box[hit], score[hit], lab[hit], ids[hit]
    ang = None if ang is None else ang[hit]

    n_fp = rng.poisson(cfg.fp_per_frame)
    fh = rng.uniform(*cfg.height_range, n_fp)
    fw = fh * rng.uniform(*cfg.aspect_range, n_fp)
    fxy = rng.uniform([0, 0], [cfg.width, cfg.height], (n_fp, 2))
    fp_box = np.concatenate([fxy - np.stack([fw, fh], 1) / 2, fxy + np.stack([fw, fh], 1) / 2], axis=1)
    fp_score = np.where(rng.random(n_fp) < 0.8, rng.uniform(0.1, 0.45, n_fp), rng.uniform(0.45, 0.7, n_fp))
    fp_lab = rng.integers(0, cfg.n_classes, n_fp)

    order = rng.permutation(len(box) + n_fp)  # detectors emit rows in no particular order
    dets = Detections(
        boxes_xyxy=torch.from_numpy(np.concatenate([box, fp_box])[order]).float(),
        scores=torch.from_numpy(np.concatenate([score, fp_score])[order]).float(),
        labels=torch.from_numpy(np.concatenate([lab, fp_lab])[order].astype(np.int64)),
        angles_rad=None if ang is None else torch.from_numpy(
            np.concatenate([ang, rng.uniform(-np.pi / 2, np.pi / 2, n_fp)])[order]).float(),
    )
    return dets, np.concatenate([src, np.full(n_fp, -1)])[order].astype(np.int64)


def make_bounce_scene(seed: int, config: BounceConfig | None = None) -> Scene:
    """Build a bouncing-boxes scene (see the module docstring); the same (seed, config) gives the same scene.

    Returns:
        ``Scene`` whose ground truth is every object on every frame (ids from 0, also while hidden) and whose
        detections are float32 boxes in frame pixels, rows in random order.
    """
    cfg = config if config is not None else BounceConfig()
    rng = np.random.default_rng(seed)
    k, limit = cfg.n_objects, np.array([cfg.width, cfg.height], dtype=np.float64)
    base_h = rng.uniform(*cfg.size_range, k)
    base_wh = np.stack([base_h * rng.uniform(*cfg.aspect_range, k), base_h], axis=1)
    heading = rng.uniform(-np.pi, np.pi, k)
    direction = np.stack([np.cos(heading), np.sin(heading)], axis=1)
    speed = rng.uniform(*cfg.speed_range, k)
    phase, period = rng.uniform(0, 2 * np.pi, (2, k)), rng.uniform(2.0, 6.0, (2, k)) * cfg.fps  # frames
    pos = rng.uniform(base_wh * (1 + cfg.size_change) / 2, limit - base_wh * (1 + cfg.size_change) / 2)
    frames = []
    for f in range(cfg.n_frames):
        wave = np.sin(2 * np.pi * f / period + phase)
        wh = base_wh * (1 + cfg.size_change * wave[1])[:, None]
        pos += direction * (speed * (1 + cfg.speed_change * wave[0]))[:, None]
        low, high = pos - wh / 2 < 0, pos + wh / 2 > limit  # bounce: reflect the motion off the edge
        direction[low | high] *= -1
        pos = np.clip(pos, wh / 2, limit - wh / 2)
        gt = np.concatenate([pos - wh / 2, pos + wh / 2], axis=1)
        dets, src = _bounce_detect(cfg, rng, gt)
        frames.append(Frame(pts_ns=round(f * 1e9 / cfg.fps), gt_ids=np.arange(k, dtype=np.int64), gt_boxes=gt,
                            gt_angles=None, detections=dets, det_gt_ids=src))
    return Scene(config=cfg, seed=seed, frames=tuple(frames))


def _bounce_detect(cfg: BounceConfig, rng: np.random.Generator, gt: FloatArray) -> tuple[Detections, IntArray]:
    """One frame's detections of ``gt`` [K, 4]: occlusion drops, random misses, jitter, a false positive."""
    area = np.prod(gt[:, 2:] - gt[:, :2], axis=1)
    covered = ((iou_matrix_xyxy(gt, gt) > cfg.occlusion_iou) & (area[None, :] > area[:, None])).any(axis=1)
    seen = np.flatnonzero(~covered & (rng.random(len(gt)) >= cfg.miss))
    boxes = gt[seen] + rng.uniform(-cfg.jitter_px, cfg.jitter_px, (len(seen), 4))
    scores = rng.uniform(*cfg.score_range, len(seen))
    src = seen.astype(np.int64)
    if rng.random() < cfg.fp_fraction:
        h = rng.uniform(*cfg.size_range)
        wh = np.array([h * rng.uniform(*cfg.aspect_range), h])
        xy = rng.uniform(wh / 2, np.array([cfg.width, cfg.height]) - wh / 2)
        boxes = np.concatenate([boxes, np.concatenate([xy - wh / 2, xy + wh / 2])[None]])
        scores = np.append(scores, rng.uniform(*cfg.fp_score_range))
        src = np.append(src, -1)
    order = rng.permutation(len(boxes))
    dets = Detections(boxes_xyxy=torch.from_numpy(boxes[order]).float(),
                      scores=torch.from_numpy(scores[order]).float(),
                      labels=torch.zeros(len(boxes), dtype=torch.int64))
    return dets, src[order]
