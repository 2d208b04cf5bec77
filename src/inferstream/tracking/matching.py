"""Optimal one-to-one matching on a similarity matrix (Hungarian, via scipy's linear_sum_assignment)."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def match_pairs(sim: FloatArray, min_sim: float) -> tuple[IntArray, IntArray]:
    """Pairs (row, col) that maximise the summed margin ``sim - min_sim``; pairs below ``min_sim`` never match.

    Leaving a row or column unmatched costs nothing, so a strong pair is never traded for two weak ones
    (equivalent to lapjv with ``cost_limit = 1 - min_sim`` on the cost ``1 - sim``).

    Args:
        sim (ndarray[A, B]): similarities (e.g. IoU), higher is better.
        min_sim: the least similarity a matched pair may have.

    Returns:
        rows (ndarray[K] int64), cols (ndarray[K] int64): matched pairs, rows ascending.
    """
    candidate = sim >= min_sim
    r, c = candidate.nonzero()
    if len(set(r.tolist())) == len(set(c.tolist())) == len(r):
        # no row or column has two candidates: matching them all is the one optimum (and the common case; the
        # solver costs far more once tracks and detections number in the tens); rows come ascending
        return r.astype(np.int64, copy=False), c.astype(np.int64, copy=False)
    margin = np.where(candidate, sim - min_sim + 1e-9, 0.0)
    r, c = linear_sum_assignment(margin, maximize=True)
    ok = margin[r, c] > 0
    return r[ok].astype(np.int64), c[ok].astype(np.int64)
