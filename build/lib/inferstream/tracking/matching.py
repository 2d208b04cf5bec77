"""Optimal one-to-one matching on a similarity matrix (Hungarian, via scipy's linear_sum_assignment)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment  # type: ignore[import-untyped]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


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


class StreamPairs:
    """Every (track, detection) pair within each stream, for trackers of several streams updated at once.

    The streams' tracks and detections sit side by side in two flat tables, each grouped by stream; the pairs are
    stream s's tracks x its detections, row-major, one stream after the other, so a similarity over the pairs holds
    each stream's [T_s, N_s] matrix and never the 30x larger one of every track against every detection.

    Args:
        row_counts (ndarray[S] int64): tracks per stream.
        col_counts (ndarray[S] int64): detections per stream.
    """

    __slots__ = ("_padded", "_size", "col_counts", "cols", "row_counts", "rows")

    def __init__(self, row_counts: IntArray, col_counts: IntArray) -> None:
        self.row_counts, self.col_counts = row_counts, col_counts
        self._padded: tuple[IntArray, IntArray, IntArray, tuple[int, int, int]] | None = None
        # one stream: every pair, the row-major [T, N] matrix; pair k is (k // N, k % N) and needs no table
        self.rows: IntArray | None = None  # [P] flat track index of each pair (several streams)
        self.cols: IntArray | None = None  # [P] flat detection index of each pair (several streams)
        self._size = int(row_counts[0] * col_counts[0])
        if len(row_counts) > 1:
            pair_counts = row_counts * col_counts
            stream = np.arange(len(row_counts)).repeat(pair_counts)
            local = np.arange(pair_counts.sum()) - _starts(pair_counts).take(stream)
            rows, cols = np.divmod(local, col_counts.take(stream))
            shape = (len(row_counts), int(row_counts.max()), int(col_counts.max()))
            pair_pos = (stream * shape[1] + rows) * shape[2] + cols  # where each pair sits in [S, T_max, N_max]
            self.rows, self.cols = rows + _starts(row_counts).take(stream), cols + _starts(col_counts).take(stream)
            self._padded = (pair_pos, _padded_positions(row_counts, shape[1]), _padded_positions(col_counts, shape[2]),
                            shape)
            self._size = len(local)

    def __len__(self) -> int:
        return self._size

    def locate(self, pairs: IntArray) -> tuple[IntArray, IntArray]:
        """The flat track and detection indices of ``pairs`` (indices into the pairs)."""
        if self.rows is None or self.cols is None:
            rows, cols = np.divmod(pairs, self.col_counts[0])
            return rows, cols
        return self.rows.take(pairs), self.cols.take(pairs)

    def select(self, row_ok: BoolArray, col_ok: BoolArray) -> IntArray:
        """The pairs whose track is ``row_ok`` [T] and detection ``col_ok`` [N], ascending."""
        if self.rows is None or self.cols is None:
            both: BoolArray = row_ok[:, None] & col_ok[None, :]
            return both.reshape(-1).nonzero()[0]
        return (row_ok.take(self.rows) & col_ok.take(self.cols)).nonzero()[0]

    def pairwise(self, fn: Callable[[FloatArray, FloatArray], FloatArray], row_values: FloatArray,
                 col_values: FloatArray) -> FloatArray:
        """``fn`` of each pair's row and column values: an elementwise function of two broadcastable arrays.

        Args:
            fn: e.g. ``iou_pairs``; called once, on arrays that broadcast to [K, S, T_max, N_max] (one stream: to
                [K, T, N]).
            row_values (ndarray[K, T]), col_values (ndarray[K, N]): per track and per detection.

        Returns:
            ndarray[P]: ``fn`` for each pair.
        """
        if self._padded is None:
            return fn(row_values[:, :, None], col_values[:, None, :]).reshape(-1)
        pair_pos, row_pos, col_pos, (n_streams, t_max, n_max) = self._padded
        k = len(row_values)
        rows, cols = np.zeros((k, n_streams * t_max)), np.zeros((k, n_streams * n_max))
        rows[:, row_pos], cols[:, col_pos] = row_values, col_values
        out = fn(rows.reshape(k, n_streams, t_max, 1), cols.reshape(k, n_streams, 1, n_max))
        return out.reshape(-1).take(pair_pos)

    def match(self, sim: FloatArray, row_ok: BoolArray, col_ok: BoolArray, min_sim: float) -> tuple[IntArray, IntArray]:
        """``match_pairs`` in every stream at once, between its rows where ``row_ok`` and its columns where ``col_ok``.

        Args:
            sim (ndarray[P]): similarity of each pair.
            row_ok (ndarray[T] bool), col_ok (ndarray[N] bool): the tracks and detections still free to match.
            min_sim: the least similarity a matched pair may have.

        Returns:
            rows, cols (ndarray[K] int64): flat indices of the matched pairs, exactly what ``match_pairs`` gives
            on each stream's [free rows, free columns] block. Only a stream where some row or column has two
            candidates needs the solver.
        """
        rows, cols = self.locate((sim >= min_sim).nonzero()[0])
        free = (row_ok.take(rows) & col_ok.take(cols)).nonzero()[0]
        if len(free) < len(rows):
            rows, cols = rows.take(free), cols.take(free)
        if len(rows) < 2:
            return rows, cols
        row_hits, col_hits = np.bincount(rows), np.bincount(cols)
        if row_hits.max() < 2 and col_hits.max() < 2:
            return rows, cols
        row_start, col_start = _starts(self.row_counts), _starts(self.col_counts)
        if len(row_start) == 2:
            return self._solve(0, row_start, col_start, sim, row_ok, col_ok, min_sim)
        conflicted = np.zeros(len(self.row_counts), dtype=bool)  # streams where a row or column has two candidates
        conflicted[np.searchsorted(row_start, (row_hits > 1).nonzero()[0], side="right") - 1] = True
        conflicted[np.searchsorted(col_start, (col_hits > 1).nonzero()[0], side="right") - 1] = True
        keep = ~conflicted[np.searchsorted(row_start, rows, side="right") - 1]
        out = [(rows[keep], cols[keep])]
        out += [self._solve(s, row_start, col_start, sim, row_ok, col_ok, min_sim)
                for s in conflicted.nonzero()[0].tolist()]
        return np.concatenate([r for r, _ in out]), np.concatenate([c for _, c in out])

    def _solve(self, s: int, row_start: IntArray, col_start: IntArray, sim: FloatArray, row_ok: BoolArray,
               col_ok: BoolArray, min_sim: float) -> tuple[IntArray, IntArray]:
        """``match_pairs`` on stream ``s``'s block of free rows and columns, as flat indices."""
        r0, r1, c0, c1 = row_start[s], row_start[s + 1], col_start[s], col_start[s + 1]
        pair0 = int(np.dot(self.row_counts[:s], self.col_counts[:s]))  # the stream's first pair
        free_rows, free_cols = row_ok[r0:r1].nonzero()[0], col_ok[c0:c1].nonzero()[0]
        block = sim[pair0:pair0 + (r1 - r0) * (c1 - c0)].reshape(r1 - r0, c1 - c0)
        r, c = match_pairs(block[free_rows[:, None], free_cols], min_sim)
        return r0 + free_rows[r], c0 + free_cols[c]


def _padded_positions(counts: IntArray, width: int) -> IntArray:
    """Where each item of a flat array grouped by stream sits in a [S, width] array of the streams' rows."""
    stream = np.arange(len(counts)).repeat(counts)
    padded: IntArray = np.arange(counts.sum()) - _starts(counts).take(stream) + stream * width
    return padded


def _starts(counts: IntArray) -> IntArray:
    """Where each group starts in a flat array, and where the last ends: [S + 1]."""
    starts: IntArray = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts
