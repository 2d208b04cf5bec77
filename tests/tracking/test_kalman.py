"""tracking/kalman.py: the constant-velocity filter, batched, with time in seconds."""
from __future__ import annotations

import numpy as np
import pytest

from inferstream.tracking.kalman import ConstantVelocityKalman, KalmanNoise


def test_kalman_learns_a_constant_velocity() -> None:
    kf = ConstantVelocityKalman()
    velocity = np.array([120.0, -30.0, 2.0, 4.0])  # px/s for cx, cy, w, h
    z0 = np.array([[100.0, 200.0, 40.0, 80.0], [500.0, 300.0, 60.0, 60.0]])
    mean, cov = kf.initiate(z0)
    dt = 0.04
    for k in range(1, 40):
        mean, cov = kf.predict(mean, cov, dt)
        mean, cov = kf.update(mean, cov, z0 + k * dt * velocity)
    np.testing.assert_allclose(mean[:, 4:], np.tile(velocity, (2, 1)), atol=1.0)
    pred, _ = kf.predict(mean, cov, 0.5)
    np.testing.assert_allclose(pred[:, :4], z0 + (39 * dt + 0.5) * velocity, atol=1.0)


def test_kalman_predict_grows_uncertainty_with_time_and_zero_dt_changes_nothing() -> None:
    kf = ConstantVelocityKalman()
    mean, cov = kf.initiate(np.array([[10.0, 10.0, 20.0, 20.0]]))
    same_mean, same_cov = kf.predict(mean, cov, 0.0)
    np.testing.assert_array_equal(same_mean, mean)
    np.testing.assert_array_equal(same_cov, cov)
    _, short = kf.predict(mean, cov, 0.1)
    _, long = kf.predict(mean, cov, 1.0)
    assert (np.diagonal(long[0]) > np.diagonal(short[0])).all()


def test_kalman_mahalanobis_matches_explicit_formula() -> None:
    kf = ConstantVelocityKalman(KalmanNoise(edge=0.05))
    mean, cov = kf.initiate(np.array([[100.0, 100.0, 30.0, 60.0], [300.0, 50.0, 80.0, 40.0]]))
    mean, cov = kf.predict(mean, cov, 0.2)
    z = np.array([[105.0, 98.0, 31.0, 58.0], [290.0, 60.0, 70.0, 45.0], [0.0, 0.0, 5.0, 5.0]])
    got = kf.mahalanobis_sq(mean, cov, z)
    r = np.array([0.5**0.5, 0.5**0.5, 2**0.5, 2**0.5]) * 0.05
    for t in range(2):
        scale = np.array([mean[t, 2], mean[t, 3], mean[t, 2], mean[t, 3]])
        s = cov[t, :4, :4] + np.diag((r * scale) ** 2)
        for n in range(3):
            y = z[n] - mean[t, :4]
            assert got[t, n] == pytest.approx(float(y @ np.linalg.inv(s) @ y), rel=1e-9)


def test_kalman_noise_rejects_non_positive_values() -> None:
    with pytest.raises(ValueError, match="KalmanNoise.velocity must be > 0"):
        KalmanNoise(velocity=0.0)
