"""tracking/kalman.py: the constant-velocity filter, batched, with time in seconds."""
from __future__ import annotations

import numpy as np
import pytest

from inferstream.tracking.kalman import STATE_ROWS, ConstantVelocityKalman, KalmanNoise, pack, unpack


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
        scale = np.maximum([mean[t, 2], mean[t, 3], mean[t, 2], mean[t, 3]], kf.noise.min_size_px)  # noise floor
        s = cov[t, :4, :4] + np.diag((r * scale) ** 2)
        for n in range(3):
            y = z[n] - mean[t, :4]
            assert got[t, n] == pytest.approx(float(y @ np.linalg.inv(s) @ y), rel=1e-9)


def test_kalman_noise_rejects_non_positive_values() -> None:
    with pytest.raises(ValueError, match="KalmanNoise.velocity must be > 0"):
        KalmanNoise(velocity=0.0)


def test_kalman_closed_form_matches_the_textbook_matrices() -> None:
    # the filter works on each coordinate's 2x2 block; the same steps with full F, Q, H, R and a solve
    noise = KalmanNoise(edge=0.05, position=0.2, velocity=3.0, size_velocity=0.5, initial_velocity=1.5)
    kf = ConstantVelocityKalman(noise)
    rng = np.random.default_rng(0)
    z = np.column_stack([rng.uniform(0, 500, (3, 2)), rng.uniform(10, 90, (3, 2))])
    mean, cov = kf.initiate(z)
    ref_mean, ref_cov = mean.copy(), cov.copy()
    h = np.eye(4, 8)
    for dt in (0.04, 0.1, 0.0, 0.5):
        f = np.eye(8) + dt * np.eye(8, k=4)
        ref_mean = ref_mean @ f.T
        ref_mean[:, 2:4] = np.maximum(ref_mean[:, 2:4], 1.0)
        s = np.maximum(ref_mean[:, [2, 3, 2, 3]], noise.min_size_px)  # sizes 10-90 px: both sides of the floor
        rate_std = np.array([noise.velocity] * 2 + [noise.size_velocity] * 2)
        q = np.concatenate([noise.position * s, rate_std * s], axis=1)
        ref_cov = f @ ref_cov @ f.T + dt * np.stack([np.diag(v) for v in q**2])
        mean, cov = kf.predict(mean, cov, dt)
        np.testing.assert_allclose(mean, ref_mean, rtol=1e-12)
        np.testing.assert_allclose(cov, ref_cov, rtol=1e-9, atol=1e-12)
        z = mean[:, :4] + rng.normal(0, 2, (3, 4))
        r = np.stack([np.diag(v) for v in (noise.edge * np.array([0.5**0.5] * 2 + [2**0.5] * 2) * s) ** 2])
        gain = ref_cov @ h.T @ np.linalg.inv(h @ ref_cov @ h.T + r)
        ref_mean = ref_mean + (gain @ (z - ref_mean @ h.T)[:, :, None])[:, :, 0]
        ref_mean[:, 2:4] = np.maximum(ref_mean[:, 2:4], 1.0)
        ref_cov = ref_cov - gain @ h @ ref_cov
        mean, cov = kf.update(mean, cov, z)
        np.testing.assert_allclose(mean, ref_mean, rtol=1e-12)
        np.testing.assert_allclose(cov, ref_cov, rtol=1e-9, atol=1e-9)


def test_kalman_packed_states_are_the_mean_and_covariance() -> None:
    kf = ConstantVelocityKalman()
    mean, cov = kf.initiate(np.array([[100.0, 200.0, 40.0, 80.0], [5.0, 6.0, 0.5, 3.0]]))
    mean, cov = kf.update(*kf.predict(mean, cov, 0.1), np.array([[104.0, 199.0, 41.0, 79.0], [6.0, 6.0, 1.0, 3.0]]))
    states = pack(mean, cov)
    assert states.shape == (STATE_ROWS, 2)
    back_mean, back_cov = unpack(states)
    np.testing.assert_array_equal(back_mean, mean)
    np.testing.assert_array_equal(back_cov, cov)
    np.testing.assert_array_equal(kf.predict_boxes(states, 0.2), kf.predict(mean, cov, 0.2)[0][:, :4].T)
