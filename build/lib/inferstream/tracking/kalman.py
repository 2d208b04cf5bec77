"""Constant-velocity Kalman filter over boxes, batched over tracks, with time steps in seconds.

State (8): ``(cx, cy, w, h, vcx, vcy, vw, vh)``: centre and size in pixels, their rates in pixels per second.
Measurement (4): ``(cx, cy, w, h)``. Noise scales with the box: x and w with the width, y and h with the height,
so one set of numbers serves small and large objects, down to ``KalmanNoise.min_size_px``: a detector's error
and an object's motion do not shrink with the box below a few pixels, and a filter sure of a 20 px box to a
pixel rejects its true detections. Time is continuous (seconds between frames, from pts),
so the filter behaves the same at any frame rate and across frames the detector skipped.

The motion model, the noise and the measurement never mix coordinates, and ``initiate`` starts from a diagonal
covariance, so each coordinate stays correlated with its own rate only: every covariance this filter produces is
four 2x2 blocks ``[[var x, cov(x, vx)], [cov(x, vx), var vx]]`` inside the 8x8 matrix, and the filter runs in
closed form on those. The tracker keeps its tracks *packed*, ``[STATE_ROWS, T]``: one row per quantity and one
column per track (rows ``MEAN``, then the blocks' ``VAR``, ``CROSS`` and ``RATE_VAR``), because it runs the filter
on every frame of every stream under one GIL, and numpy's per-call overhead, far higher on strided views such as
``mean[:, 2:4]`` than on contiguous rows, was most of its cost. The ``(mean, cov)`` methods are the same filter in
the textbook form; they expect covariances that this filter produced.

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
        min_size_px: boxes smaller than this (width for x and w, height for y and h) get the noise of a box this
            size: at 16-40 px, 2 px of jitter and 4 px per frame of motion are 5-25 % of the box, which the
            relative levels above would call impossible.
    """

    edge: float = 0.04
    position: float = 0.1
    velocity: float = 2.0
    size_velocity: float = 0.2
    initial_velocity: float = 2.0
    min_size_px: float = 50.0

    def __post_init__(self) -> None:
        for name in ("edge", "position", "velocity", "size_velocity", "initial_velocity", "min_size_px"):
            if not getattr(self, name) > 0:
                raise ValueError(f"KalmanNoise.{name} must be > 0, got {getattr(self, name)}")


_EDGE_TO_MEASUREMENT = np.array([0.5**0.5, 0.5**0.5, 2**0.5, 2**0.5])  # edge std -> (cx, cy, w, h) std
_WHWH = np.array([2, 3, 2, 3])  # the size that scales each of (cx, cy, w, h)

# Rows of the packed layout: the mean, then per coordinate its variance, its covariance with its rate, and the
# rate's variance.
STATE_ROWS = 20
MEAN, POS, RATE = slice(0, 8), slice(0, 4), slice(4, 8)
VAR, CROSS, RATE_VAR = slice(8, 12), slice(12, 16), slice(16, 20)
# the same entries in a flattened 8x8 covariance, where (i, j) is at 8 i + j: every 9th entry, strided views
_COV_VAR, _COV_CROSS, _COV_CROSS_T, _COV_RATE_VAR = slice(0, 28, 9), slice(4, 32, 9), slice(32, 60, 9), slice(36, 64, 9)


def _scale(boxes: FloatArray, min_px: float) -> FloatArray:
    """Noise scale [4, K] of packed states or ``(cx, cy, w, h)`` rows: (w, h, w, h), at least ``min_px``."""
    return np.maximum(boxes.take(_WHWH, axis=0), min_px)


def _moved(dt_s: float | FloatArray) -> bool | npt.NDArray[np.bool_]:
    """Which tracks a prediction moves: those with a time step (a step of 0 leaves a track as it is)."""
    return True if not isinstance(dt_s, np.ndarray) else dt_s > 0


def pack(mean: FloatArray, cov: FloatArray) -> FloatArray:
    """``(mean [T, 8], cov [T, 8, 8])`` to packed states [STATE_ROWS, T]."""
    flat = cov.reshape(-1, 64)
    return np.concatenate([mean.T, flat[:, _COV_VAR].T, flat[:, _COV_CROSS].T, flat[:, _COV_RATE_VAR].T])


def unpack(states: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Packed states [STATE_ROWS, T] to ``(mean [T, 8], cov [T, 8, 8])``."""
    cov = np.zeros((states.shape[1], 64))
    cov[:, _COV_VAR], cov[:, _COV_RATE_VAR] = states[VAR].T, states[RATE_VAR].T
    cov[:, _COV_CROSS] = cov[:, _COV_CROSS_T] = states[CROSS].T
    return states[MEAN].T.copy(), cov.reshape(-1, 8, 8)


class ConstantVelocityKalman:
    """Batched constant-velocity filter; see the module docstring for the state layout.

    Args:
        noise: noise levels (see ``KalmanNoise``).
    """

    def __init__(self, noise: KalmanNoise | None = None) -> None:
        self.noise = noise if noise is not None else KalmanNoise()
        n = self.noise
        self._measurement_unit_std = (n.edge * _EDGE_TO_MEASUREMENT)[:, None]  # per pixel of box size
        # process noise variance per second and squared pixel of box size: of the position, then of the rates
        self._process_unit_var = n.position**2
        self._rate_process_unit_var = np.array([[n.velocity], [n.velocity], [n.size_velocity], [n.size_velocity]]) ** 2

    # -- packed states [STATE_ROWS, K], the tracker's form ----------------------------------------------------

    def initiate_states(self, boxes: FloatArray) -> FloatArray:
        """New tracks, with zero velocity, from first detections ``(cx, cy, w, h)`` rows [4, K], pixels."""
        s = _scale(boxes, self.noise.min_size_px)
        states = np.zeros((STATE_ROWS, boxes.shape[1]))
        states[POS] = boxes
        states[VAR] = (self._measurement_unit_std * s) ** 2
        states[RATE_VAR] = (self.noise.initial_velocity * s) ** 2
        return states

    def predict_boxes(self, states: FloatArray, dt_s: float | FloatArray) -> FloatArray:
        """``(cx, cy, w, h)`` rows [4, T] ``dt_s`` seconds ahead (``predict_states``'s boxes alone); a copy."""
        if not isinstance(dt_s, np.ndarray) and dt_s <= 0:
            return states[POS].copy()
        boxes = states[POS] + dt_s * states[RATE]
        np.maximum(boxes[2:], _MIN_SIZE_PX, out=boxes[2:], where=_moved(dt_s))
        return boxes

    def predict_states(self, states: FloatArray, dt_s: float | FloatArray) -> FloatArray:
        """Every track ``dt_s`` seconds (>= 0) forward; sizes kept >= 1 px.

        ``dt_s`` is one time step for all tracks, or one per track [T] (the tracks of several streams); a track
        with a step of 0 is returned unchanged.
        """
        x = states.copy()
        if not isinstance(dt_s, np.ndarray) and dt_s <= 0:
            return x
        x[POS] += dt_s * x[RATE]  # as predict_boxes
        np.maximum(x[2:4], _MIN_SIZE_PX, out=x[2:4], where=_moved(dt_s))
        var, cross, s = x[VAR], x[CROSS], _scale(x, self.noise.min_size_px)
        # F P F^T with F = [[I, dt I], [0, I]], block by block: var + dt cross + dt cross', cross' = cross + dt rate
        var += dt_s * cross
        cross += dt_s * x[RATE_VAR]
        var += dt_s * cross
        s *= s  # + Q
        var += dt_s * self._process_unit_var * s
        x[RATE_VAR] += dt_s * self._rate_process_unit_var * s
        return x

    def innovation_var(self, states: FloatArray) -> FloatArray:
        """Diagonal of ``S = H P H^T + R`` [4, K] (S is diagonal: coordinates are independent)."""
        measurement_var: FloatArray = (self._measurement_unit_std * _scale(states, self.noise.min_size_px)) ** 2
        return states[VAR] + measurement_var

    def update_states(self, states: FloatArray, boxes: FloatArray) -> FloatArray:
        """Correct K tracks with one measurement each: column k of ``boxes`` [4, K], ``(cx, cy, w, h)``."""
        x = states.copy()
        k = x.shape[1]
        # per coordinate, K = P H^T S^-1 = (var, cross) / s: [2, 4, K], the gains of the position and of the rate
        var_cross = x[VAR.start:CROSS.stop].reshape(2, 4, k)
        gain = var_cross / self.innovation_var(x)
        mean = x[MEAN].reshape(2, 4, k)
        mean += gain * (boxes - x[POS])
        np.maximum(x[2:4], _MIN_SIZE_PX, out=x[2:4])
        x[RATE_VAR] -= gain[1] * x[CROSS]  # P - K H P, block by block (the rate's first: it needs the old cross)
        var_cross -= gain[0] * var_cross
        return x

    def mahalanobis_sq_states(self, states: FloatArray, boxes: FloatArray) -> FloatArray:
        """``y^T S^-1 y`` [K] of column k of ``boxes`` [4, K] from track k's predicted measurement."""
        innovation = boxes - states[POS]
        d2: FloatArray = (innovation * innovation / self.innovation_var(states)).sum(axis=0)
        return d2

    # -- (mean [T, 8], cov [T, 8, 8]) ---------------------------------------------------------------------------

    def initiate(self, boxes_cxcywh: FloatArray) -> tuple[FloatArray, FloatArray]:
        """New tracks from first detections.

        Args:
            boxes_cxcywh (ndarray[K, 4]): ``(cx, cy, w, h)``, pixels.

        Returns:
            mean (ndarray[K, 8]) with zero velocity, cov (ndarray[K, 8, 8]).
        """
        return unpack(self.initiate_states(np.asarray(boxes_cxcywh, dtype=np.float64).reshape(-1, 4).T))

    def predict(self, mean: FloatArray, cov: FloatArray, dt_s: float) -> tuple[FloatArray, FloatArray]:
        """Move every track ``dt_s`` seconds forward.

        Args:
            mean (ndarray[T, 8]), cov (ndarray[T, 8, 8]): current states.
            dt_s: elapsed time in seconds, >= 0 (0 returns copies).

        Returns:
            mean (ndarray[T, 8]), cov (ndarray[T, 8, 8]) at the new time; sizes kept >= 1 px.
        """
        return unpack(self.predict_states(pack(mean, cov), dt_s))

    def update(self, mean: FloatArray, cov: FloatArray, boxes_cxcywh: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Correct K tracks with one measurement each (row k of ``boxes_cxcywh`` measures track k).

        Args:
            mean (ndarray[K, 8]), cov (ndarray[K, 8, 8]): predicted states.
            boxes_cxcywh (ndarray[K, 4]): measured ``(cx, cy, w, h)``, pixels.

        Returns:
            mean (ndarray[K, 8]), cov (ndarray[K, 8, 8]) after the correction.
        """
        z = np.asarray(boxes_cxcywh, dtype=np.float64).reshape(-1, 4)
        return unpack(self.update_states(pack(mean, cov), z.T))

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
        track, meas = np.indices((len(mean), len(z))).reshape(2, -1)
        d2 = self.mahalanobis_sq_states(pack(mean, cov).take(track, axis=1), z.T.take(meas, axis=1))
        return d2.reshape(len(mean), len(z))
