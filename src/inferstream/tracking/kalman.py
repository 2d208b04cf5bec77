"""Constant-velocity Kalman filter over boxes, batched over tracks, with time steps in seconds.

State (8): ``(cx, cy, w, h, vcx, vcy, vw, vh)``: centre and size in pixels, their rates in pixels per second.
Measurement (4): ``(cx, cy, w, h)``. Noise scales with the box: x and w with the width, y and h with the height,
so one set of numbers serves small and large objects. Time is continuous (seconds between frames, from pts),
so the filter behaves the same at any frame rate and across frames the detector skipped.

Every method is pure: it takes and returns arrays and never keeps state.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_MIN_SIZE_PX = 1.0


@dataclass(frozen=True, slots=True)
class KalmanNoise:
    """Noise levels, in box sizes (a std of 0.05 on x means 5 % of the box width).

    Attributes:
        edge: std of each edge of a detected box (independent edges: the centre's error is ``edge / sqrt 2``,
            the size's ``edge * sqrt 2``). Larger trusts detections less: smoother, laggier boxes.
        position: random-walk std of the centre/size per sqrt(second). Larger lets the box follow sudden jumps.
        velocity: random-walk std of the centre's velocity per sqrt(second), in box sizes per second. Larger
            adapts faster to turns and speed changes, smaller predicts straighter through occlusions.
        size_velocity: the same for the rate of change of the box size. Sizes change slower than positions
            (an object nears or recedes), so a small value keeps a coasting track from taking a box of
            another size.
        initial_velocity: std of a new track's (unknown, zero-mean) velocity, box sizes per second. Larger lets
            the first matches pull the track up to speed faster.
    """

    edge: float = 0.04
    position: float = 0.1
    velocity: float = 2.0
    size_velocity: float = 0.2
    initial_velocity: float = 2.0

    def __post_init__(self) -> None:
        for name in ("edge", "position", "velocity", "size_velocity", "initial_velocity"):
            if not getattr(self, name) > 0:
                raise ValueError(f"KalmanNoise.{name} must be > 0, got {getattr(self, name)}")


_EDGE_TO_MEASUREMENT = np.array([0.5**0.5, 0.5**0.5, 2**0.5, 2**0.5])  # edge std -> (cx, cy, w, h) std


def _scale(boxes_cxcywh: FloatArray) -> FloatArray:
    """Per-coordinate size scale [N, 4]: (w, h, w, h), at least 1 px."""
    w = np.maximum(boxes_cxcywh[:, 2], _MIN_SIZE_PX)
    h = np.maximum(boxes_cxcywh[:, 3], _MIN_SIZE_PX)
    return np.stack([w, h, w, h], axis=1)


class ConstantVelocityKalman:
    """Batched constant-velocity filter; see the module docstring for the state layout.

    Args:
        noise: noise levels (see ``KalmanNoise``).
    """

    def __init__(self, noise: KalmanNoise | None = None) -> None:
        self.noise = noise if noise is not None else KalmanNoise()

    def _measurement_std(self, boxes_cxcywh: FloatArray) -> FloatArray:
        """Measurement noise std [K, 4] of ``(cx, cy, w, h)`` for boxes of these sizes."""
        return self.noise.edge * _EDGE_TO_MEASUREMENT * _scale(boxes_cxcywh)

    def _innovation_cov(self, mean: FloatArray, cov: FloatArray) -> FloatArray:
        """``S = H P H^T + R`` [K, 4, 4]."""
        s_cov = cov[:, :4, :4].copy()
        idx = np.arange(4)
        s_cov[:, idx, idx] += self._measurement_std(mean[:, :4]) ** 2
        return s_cov

    def initiate(self, boxes_cxcywh: FloatArray) -> tuple[FloatArray, FloatArray]:
        """New tracks from first detections.

        Args:
            boxes_cxcywh (ndarray[K, 4]): ``(cx, cy, w, h)``, pixels.

        Returns:
            mean (ndarray[K, 8]) with zero velocity, cov (ndarray[K, 8, 8]).
        """
        z = np.asarray(boxes_cxcywh, dtype=np.float64).reshape(-1, 4)
        s = _scale(z)
        mean = np.concatenate([z, np.zeros_like(z)], axis=1)
        std = np.concatenate([self._measurement_std(z), self.noise.initial_velocity * s], axis=1)
        cov = np.zeros((len(z), 8, 8))
        idx = np.arange(8)
        cov[:, idx, idx] = std**2
        return mean, cov

    def predict(self, mean: FloatArray, cov: FloatArray, dt_s: float) -> tuple[FloatArray, FloatArray]:
        """Move every track ``dt_s`` seconds forward.

        Args:
            mean (ndarray[T, 8]), cov (ndarray[T, 8, 8]): current states.
            dt_s: elapsed time in seconds, >= 0 (0 returns copies).

        Returns:
            mean (ndarray[T, 8]), cov (ndarray[T, 8, 8]) at the new time; sizes kept >= 1 px.
        """
        if dt_s <= 0 or len(mean) == 0:
            return mean.copy(), cov.copy()
        new_mean = mean.copy()
        new_mean[:, :4] += dt_s * mean[:, 4:]
        new_mean[:, 2:4] = np.maximum(new_mean[:, 2:4], _MIN_SIZE_PX)
        f = np.eye(8)
        f[:4, 4:] = dt_s * np.eye(4)
        s = _scale(new_mean[:, :4])
        vel = np.array([self.noise.velocity] * 2 + [self.noise.size_velocity] * 2)
        q_std = np.concatenate([self.noise.position * s, vel * s], axis=1)
        new_cov = f @ cov @ f.T
        idx = np.arange(8)
        new_cov[:, idx, idx] += dt_s * q_std**2
        return new_mean, new_cov

    def update(self, mean: FloatArray, cov: FloatArray, boxes_cxcywh: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Correct K tracks with one measurement each (row k of ``boxes_cxcywh`` measures track k).

        Args:
            mean (ndarray[K, 8]), cov (ndarray[K, 8, 8]): predicted states.
            boxes_cxcywh (ndarray[K, 4]): measured ``(cx, cy, w, h)``, pixels.

        Returns:
            mean (ndarray[K, 8]), cov (ndarray[K, 8, 8]) after the correction.
        """
        z = np.asarray(boxes_cxcywh, dtype=np.float64).reshape(-1, 4)
        if len(z) == 0:
            return mean.copy(), cov.copy()
        s_cov = self._innovation_cov(mean, cov)
        pht = cov[:, :, :4]  # P H^T, [K, 8, 4]
        gain = np.linalg.solve(s_cov, pht.transpose(0, 2, 1)).transpose(0, 2, 1)  # [K, 8, 4]; S is symmetric
        innovation = z - mean[:, :4]
        new_mean = mean + np.einsum("kij,kj->ki", gain, innovation)
        new_mean[:, 2:4] = np.maximum(new_mean[:, 2:4], _MIN_SIZE_PX)
        new_cov = cov - gain @ pht.transpose(0, 2, 1)
        return new_mean, new_cov

    def mahalanobis_sq(self, mean: FloatArray, cov: FloatArray, boxes_cxcywh: FloatArray) -> FloatArray:
        """Squared Mahalanobis distance of every measurement from every track's predicted measurement.

        Args:
            mean (ndarray[T, 8]), cov (ndarray[T, 8, 8]): predicted states.
            boxes_cxcywh (ndarray[N, 4]): measurements ``(cx, cy, w, h)``, pixels.

        Returns:
            ndarray[T, N]: ``y^T S^-1 y`` with innovation ``y`` and innovation covariance ``S``; chi-square with
            4 degrees of freedom for true matches.
        """
        z = np.asarray(boxes_cxcywh, dtype=np.float64).reshape(-1, 4)
        if len(mean) == 0 or len(z) == 0:
            return np.zeros((len(mean), len(z)))
        s_cov = self._innovation_cov(mean, cov)
        innovation = z[None, :, :] - mean[:, None, :4]  # [T, N, 4]
        solved = np.linalg.solve(s_cov, innovation.transpose(0, 2, 1))  # [T, 4, N]
        d2: FloatArray = np.einsum("tni,tin->tn", innovation, solved)
        return d2
