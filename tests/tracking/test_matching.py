"""tracking/matching.py against a brute-force search over every partial matching."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped]

from inferstream.tracking.matching import match_pairs


def reference_best_margin(sim: np.ndarray, min_sim: float) -> float:
    """Largest summed (sim - min_sim) over one-to-one matchings of pairs with sim >= min_sim."""
    rows, cols = sim.shape
    best = 0.0
    for k in range(1, min(rows, cols) + 1):
        for rs in itertools.combinations(range(rows), k):
            for cs in itertools.permutations(range(cols), k):
                vals = sim[list(rs), list(cs)]
                if (vals >= min_sim).all():
                    best = max(best, float((vals - min_sim).sum()))
    return best


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("min_sim", [0.1, 0.3, 0.6])
def test_match_pairs_is_optimal(seed: int, min_sim: float) -> None:
    rng = np.random.default_rng(seed)
    sim = rng.uniform(0, 1, (int(rng.integers(1, 5)), int(rng.integers(1, 5)))) * (rng.random((1, 1)) + 0.2)
    r, c = match_pairs(sim, min_sim)
    assert len(set(r.tolist())) == len(r) and len(set(c.tolist())) == len(c)
    assert (sim[r, c] >= min_sim).all()
    assert float((sim[r, c] - min_sim).sum()) == pytest.approx(reference_best_margin(sim, min_sim), abs=1e-6)


def test_match_pairs_keeps_a_strong_pair_over_two_weak_ones() -> None:
    # track 0 overlaps det 0 well and det 1 weakly; track 1 overlaps only det 0, weakly. Maximising the number
    # of matches would pair 0-1 and 1-0; the margin objective keeps 0-0 and leaves the rest unmatched.
    sim = np.array([[0.9, 0.25], [0.25, 0.0]])
    r, c = match_pairs(sim, 0.2)
    assert (r.tolist(), c.tolist()) == ([0], [0])


def test_match_pairs_empty() -> None:
    r, c = match_pairs(np.zeros((0, 3)), 0.5)
    assert r.shape == c.shape == (0,)


@pytest.mark.parametrize("seed", range(5))
def test_match_pairs_without_conflicts_takes_every_candidate(seed: int) -> None:
    # the common case (each track overlaps one detection) skips the solver; it must agree with it
    rng = np.random.default_rng(seed)
    sim = np.zeros((30, 40))
    rows, cols = rng.permutation(30)[:20], rng.permutation(40)[:20]
    sim[rows, cols] = rng.uniform(0.1, 1.0, 20)
    r, c = match_pairs(sim, 0.3)
    expected_r, expected_c = linear_sum_assignment(np.where(sim >= 0.3, sim, 0.0), maximize=True)
    ok = sim[expected_r, expected_c] >= 0.3
    assert (r.tolist(), c.tolist()) == (expected_r[ok].tolist(), expected_c[ok].tolist())
