"""The tracks of several streams side by side, as ``bytetrack_core`` updates them in one pass: one table grouped
by stream, each track's stream and frame time beside it, and the steps that add, drop, confirm and split tracks
while keeping that grouping."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from inferstream.tracking.table import TrackTable

if TYPE_CHECKING:
    from inferstream.tracking.bytetrack_core import StreamState
    from inferstream.tracking.kalman import ConstantVelocityKalman

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class StreamTracks:
    """The streams' tracks side by side, grouped by stream: the table, each track's stream and frame time."""

    __slots__ = ("pts", "stream", "table")

    def __init__(self, table: TrackTable, stream: IntArray, pts: IntArray) -> None:
        self.table, self.stream, self.pts = table, stream, pts

    @classmethod
    def gather(cls, streams: list[StreamState], pts_ns: list[int]) -> StreamTracks:
        if len(streams) == 1:
            table = streams[0].tracks
            return cls(table, np.zeros(len(table), dtype=np.int64), np.full(len(table), pts_ns[0]))
        tables = [s.tracks for s in streams]
        stream = np.arange(len(streams)).repeat([len(t) for t in tables])
        return cls(TrackTable.join(tables), stream, np.array(pts_ns).take(stream))

    def keep(self, keep: BoolArray | IntArray) -> None:
        self.table, self.stream, self.pts = self.table.select(keep), self.stream[keep], self.pts[keep]

    def expire(self, max_lost_ns: int, n_streams: int) -> list[tuple[int, ...]]:
        """Drop tracks unseen for longer than ``max_lost_ns``; return each stream's confirmed ids that ended."""
        t = self.table
        stale = t.last_seen_ns < self.pts - max_lost_ns
        if not np.count_nonzero(stale):
            return [()] * n_streams
        ended: list[list[int]] = [[] for _ in range(n_streams)]
        gone = stale & (t.ids >= 0)
        for s, track_id in zip(self.stream[gone].tolist(), t.ids[gone].tolist()):
            ended[s].append(track_id)
        self.keep(~stale)
        return [tuple(sorted(ids)) for ids in ended]

    def spawn(self, kf: ConstantVelocityKalman, z: FloatArray, boxes: FloatArray, scores: FloatArray,
              labels: IntArray, angles: FloatArray | None, new: IntArray, d_stream: IntArray, pts_ns: IntArray,
              track_of_det: IntArray, det_of_track: IntArray) -> IntArray:
        """Append tentative tracks for detections ``new`` after their streams' tracks; update ``track_of_det`` in
        place and return the new ``det_of_track``."""
        k, n_old = len(new), len(self.table)
        stream = d_stream.take(new)
        now = pts_ns.take(stream)
        spawned = TrackTable(kf.initiate_states(z[:, new]), np.full(k, -1, dtype=np.int64),
                             np.ones(k, dtype=np.int64), now, now.copy(), np.zeros(k, dtype=bool),
                             labels[new].astype(np.int64), scores[new], np.zeros(k) if angles is None else angles[new],
                             (boxes[new, 2:] - boxes[new, :2]).T)
        self.table = TrackTable.join([self.table, spawned])
        self.stream, self.pts = np.concatenate([self.stream, stream]), np.concatenate([self.pts, now])
        track_of_det[new] = n_old + np.arange(k)
        det_of_track = np.concatenate([det_of_track, new])
        if n_old and self.stream[n_old - 1] > stream[0]:  # regroup by stream, each stream's new tracks last
            order = self.stream.argsort(kind="stable")
            self.keep(order)
            position = np.empty_like(order)
            position[order] = np.arange(len(order))
            has = track_of_det >= 0
            track_of_det[has] = position[track_of_det[has]]
            det_of_track = det_of_track[order]
        return det_of_track

    def confirm(self, min_hits: int, next_ids: list[int]) -> list[int]:
        """Give ids to the tentative tracks with ``min_hits``, from each stream's ``next_ids``; return those
        advanced. A tentative track that misses a frame is dropped, so each is confirmed exactly ``min_hits - 1``
        updates after it spawned: ids follow each stream's (spawn) order, and its confirmed tracks stay sorted by id.
        """
        t = self.table
        ready = ((t.ids < 0) & (t.hits >= min_hits)).nonzero()[0]
        if len(ready):
            ids = t.ids.copy()
            next_ids = list(next_ids)
            for i, s in zip(ready.tolist(), self.stream[ready].tolist()):
                ids[i], next_ids[s] = next_ids[s], next_ids[s] + 1
            t.ids = ids
        return next_ids

    def split(self, n_streams: int) -> list[TrackTable]:
        """Each stream's tracks (views)."""
        if n_streams == 1:
            return [self.table]
        starts = np.searchsorted(self.stream, np.arange(n_streams + 1)).tolist()
        return [self.table.select(slice(a, b)) for a, b in itertools.pairwise(starts)]
