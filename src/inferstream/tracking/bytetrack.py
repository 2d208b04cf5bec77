"""ByteTrack (Zhang et al., ECCV 2022) on numpy: Kalman motion + IoU, associating every detection box.

Per frame, after the Kalman prediction: (1) confirmed tracks, tracked or lost, take the high-score detections
by IoU with their predicted boxes; (2) confirmed tracks still free take the low-score detections (an object
that is partly hidden often scores low: this is what keeps its id); (3) recovery: confirmed tracks still free
take the high-score detections left, their predicted centre allowed to move a few standard deviations first
(finds objects that turned while hidden); (4) tentative tracks take the high-score detections left; (5) the
high-score detections still left start tentative tracks. Every stage is an optimal (Hungarian) assignment and
respects a Mahalanobis motion gate. Oriented boxes associate on the axis-aligned envelope of their rotated
corners, which is also what the Kalman filter follows (an OBB detector may swap width and height as the angle
wraps; the envelope does not), and keep their angle and unrotated size for predicted boxes.
"""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import torch

from inferstream.detections import Detections
from inferstream.errors import ConfigError
from inferstream.tracking.base import TrackResult, TrackState
from inferstream.tracking.geometry import (
    cxcywh_to_xyxy,
    envelope_xyxy,
    iou_matrix_columns,
    slack_iou_matrix,
    xyxy_to_cxcywh,
)
from inferstream.tracking.kalman import POS, VAR, ConstantVelocityKalman, KalmanNoise
from inferstream.tracking.matching import match_pairs
from inferstream.tracking.table import TrackTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_NS_PER_S = 1_000_000_000
_NO_TRACK = np.array([-1])


class ByteTrack:
    """ByteTrack for one stream; see the module docstring. All arguments are keyword-only.

    Args:
        high_score: detections scoring at least this are matched first and may start tracks. Lower it for
            a detector whose scores run low.
        low_score: detections below this are ignored. Those between ``low_score`` and ``high_score`` can only
            extend confirmed tracks (never start one), which carries ids through partial occlusions.
        new_track_score: an unmatched high-score detection must score at least this to start a track. Higher
            gives fewer tracks born from false positives, at the cost of later starts.
        match_iou: minimum IoU between a track's predicted box and a high-score detection. Lower follows fast
            or erratic motion; higher avoids swaps between neighbours.
        low_match_iou: minimum IoU for the low-score stage (kept strict: low scores are often false positives).
        tentative_match_iou: minimum IoU for a tentative track's second detection.
        recover_sigmas: reach of the recovery stage, where tracks still unmatched take the high-score
            detections left: a track's predicted centre may move this many standard deviations (of the Kalman
            prediction, which grow while a track coasts) towards a detection before their IoU is taken.
            Recovers objects that turned while occluded; 0 disables the stage.
        recover_iou: minimum IoU, after that move, for the recovery stage.
        motion_gate: a detection may only match a track if the squared Mahalanobis distance of its box
            ``(cx, cy, w, h)`` from the track's Kalman prediction is at most this (chi-square with 4 degrees of
            freedom: 13.3 keeps 99 % of true matches, 18.5 keeps 99.9 %). Stops a track from jumping to a
            neighbour of another size or speed when its own object is hidden; 0 disables the gate.
        max_lost_s: how long (pts seconds) a track survives without a detection. Longer bridges longer
            occlusions, but a departed object's track may take over a newcomer's id.
        coast_s: how long (pts seconds) a lost track keeps being reported in ``TrackResult.predicted`` with
            its motion-model box. 0 reports a track only on frames where a detection matched it (and on
            ``predict_only`` frames while it is not lost). Capped by ``max_lost_s``.
        min_hits: consecutive matched detection frames before a track is confirmed and gets an id; 1 confirms
            at once. Higher suppresses flickering false positives, at the cost of ids appearing later.
        per_class: only match detections and tracks of the same label. Off (class-agnostic), a track follows
            an object whose label flickers and takes the latest label.
        fuse_score: weigh the first stage's IoU by the detection's score (ByteTrack's MOT17 setting), which
            favours confident detections when several overlap a track.
        first_id: the first id this instance hands out (give streams disjoint ranges for unique ids
            pipeline-wide, e.g. ``stream_index << 32``).
        kalman_noise: motion-model noise, see ``KalmanNoise``.

    Raises:
        ConfigError: a score or IoU threshold outside [0, 1], ``low_score > high_score``, a negative time, sigma
            or gate, ``min_hits < 1`` or ``first_id < 0``.
    """

    def __init__(
        self,
        *,
        high_score: float = 0.5,
        low_score: float = 0.1,
        new_track_score: float = 0.6,
        match_iou: float = 0.2,
        low_match_iou: float = 0.5,
        tentative_match_iou: float = 0.3,
        recover_sigmas: float = 3.0,
        recover_iou: float = 0.3,
        motion_gate: float = 13.3,
        max_lost_s: float = 2.0,
        coast_s: float = 0.2,
        min_hits: int = 2,
        per_class: bool = False,
        fuse_score: bool = False,
        first_id: int = 1,
        kalman_noise: KalmanNoise | None = None,
    ) -> None:
        thresholds = {"high_score": high_score, "low_score": low_score, "new_track_score": new_track_score,
                      "match_iou": match_iou, "low_match_iou": low_match_iou,
                      "tentative_match_iou": tentative_match_iou, "recover_iou": recover_iou}
        for name, value in thresholds.items():
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"ByteTrack: {name} must be in [0, 1], got {value}")
        if low_score > high_score:
            raise ConfigError(f"ByteTrack: low_score ({low_score}) must not exceed high_score ({high_score})")
        if min(max_lost_s, coast_s, recover_sigmas, motion_gate) < 0 or min_hits < 1 or first_id < 0:
            raise ConfigError(f"ByteTrack: need max_lost_s, coast_s, recover_sigmas, motion_gate >= 0, "
                              f"min_hits >= 1, first_id >= 0; got {max_lost_s}, {coast_s}, {recover_sigmas}, "
                              f"{motion_gate}, {min_hits}, {first_id}")
        self.high_score, self.low_score, self.new_track_score = high_score, low_score, new_track_score
        self.match_iou, self.low_match_iou, self.tentative_match_iou = match_iou, low_match_iou, tentative_match_iou
        self.recover_sigmas, self.recover_iou, self.motion_gate = recover_sigmas, recover_iou, motion_gate
        self.max_lost_ns = round(max_lost_s * _NS_PER_S)
        self.coast_ns = round(coast_s * _NS_PER_S)
        self.min_hits, self.per_class, self.fuse_score = min_hits, per_class, fuse_score
        self._kf = ConstantVelocityKalman(kalman_noise)
        self._next_id = itertools.count(first_id)
        self.reset()

    def reset(self) -> None:
        """Forget every track; ids keep counting, so this instance never reuses one."""
        self._tracks = TrackTable.empty()
        self._state_ns: int | None = None  # time of the Kalman states (latest update)
        self._now_ns: int | None = None  # latest pts seen (update or predict_only)
        self._device = torch.device("cpu")
        self._oriented = False

    def update(self, dets: Detections, pts_ns: int) -> TrackResult:
        """Associate one frame's detections with the tracks.

        Args:
            dets: this frame's detections, any device; rows below ``low_score`` are ignored.
            pts_ns: the frame's pts in nanoseconds; must not be earlier than the previous call's.

        Returns:
            ``TrackResult`` with ``detections`` = ``dets`` (same rows and order) plus ``track_ids``.

        Raises:
            ValueError: ``pts_ns`` is negative or went backwards (call ``reset()`` after a seek).
        """
        dt_s = self._advance(pts_ns)
        self._device, self._oriented = dets.boxes_xyxy.device, dets.oriented
        self._tracks.states = self._kf.predict_states(self._tracks.states, dt_s)
        ended = self._expire(pts_ns)
        t = self._tracks
        boxes = dets.boxes_xyxy.numpy(force=True).astype(np.float64)
        scores = dets.scores.numpy(force=True).astype(np.float64)
        labels = dets.labels.numpy(force=True)
        angles = None if dets.angles_rad is None else dets.angles_rad.numpy(force=True).astype(np.float64)

        # what the filter measures, (cx, cy, w, h) rows [4, N]
        z = xyxy_to_cxcywh(boxes if angles is None else envelope_xyxy(boxes, angles)).T.copy()
        track_of_det, det_of_track, new = self._associate_all(t, z, scores, labels)
        self._correct(t, det_of_track, z, boxes, scores, labels, angles, pts_ns)
        dropped = t.lost & (t.ids < 0)  # a tentative track that misses a frame is dropped
        if np.count_nonzero(dropped):
            keep = ~dropped
            self._tracks = t.select(keep)
            det_of_track = det_of_track[keep]
            has = track_of_det >= 0
            track_of_det[has] = (keep.cumsum() - 1)[track_of_det[has]]  # matched tracks are all kept

        if len(new):
            track_of_det[new] = len(self._tracks) + np.arange(len(new))
            det_of_track = np.concatenate([det_of_track, new])
            self._tracks = self._tracks.concat(self._spawn(z, boxes, scores, labels, angles, new, pts_ns))
        self._confirm()

        ids = np.concatenate([self._tracks.ids, _NO_TRACK]).take(track_of_det)  # index -1: the appended -1
        out = dets.with_track_ids(torch.from_numpy(ids).to(self._device))
        return self._result(out, self._tracks.states[POS], det_of_track, pts_ns, ended)

    def predict_only(self, pts_ns: int) -> TrackResult:
        """Carry the confirmed tracks forward to a frame the detector skipped.

        The filter states stay as of the last ``update``; tracks lost for longer than ``max_lost_s`` end.

        Args:
            pts_ns: the frame's pts in nanoseconds; must not be earlier than the previous call's.

        Returns:
            ``TrackResult`` with empty ``detections``; ``predicted`` holds every confirmed track that was not
            lost at the last ``update``, and lost ones for ``coast_s``.

        Raises:
            ValueError: ``pts_ns`` is negative or went backwards.
        """
        self._check_time(pts_ns)
        self._now_ns = pts_ns
        ended = self._expire(pts_ns)
        dt_s = 0.0 if self._state_ns is None else (pts_ns - self._state_ns) / _NS_PER_S
        boxes = self._kf.predict_boxes(self._tracks.states, dt_s)
        no_dets = _no_rows(self._device, self._oriented)
        return self._result(no_dets, boxes, np.full(len(self._tracks), -1, dtype=np.int64), pts_ns, ended)

    # -- internals ------------------------------------------------------------------------------------------

    def _check_time(self, pts_ns: int) -> None:
        if pts_ns < 0:
            raise ValueError(f"pts_ns must be >= 0, got {pts_ns}")
        if self._now_ns is not None and pts_ns < self._now_ns:
            raise ValueError(f"pts_ns went backwards ({pts_ns} < {self._now_ns}); call reset() after a seek")

    def _advance(self, pts_ns: int) -> float:
        """Check and record the update's time; return seconds since the last update's."""
        self._check_time(pts_ns)
        dt_s = 0.0 if self._state_ns is None else (pts_ns - self._state_ns) / _NS_PER_S
        self._state_ns = self._now_ns = pts_ns
        return dt_s

    def _expire(self, pts_ns: int) -> tuple[int, ...]:
        """Drop tracks unseen for longer than ``max_lost_ns``; return the confirmed ids that ended."""
        t = self._tracks
        stale = t.last_seen_ns < pts_ns - self.max_lost_ns
        if not np.count_nonzero(stale):
            return ()
        self._tracks = t.select(~stale)
        return tuple(sorted(t.ids[stale & (t.ids >= 0)].tolist()))

    def _correct(self, t: TrackTable, det_of_track: IntArray, z: FloatArray, boxes: FloatArray, scores: FloatArray,
                 labels: IntArray, angles: FloatArray | None, pts_ns: int) -> None:
        """Kalman-correct the matched tracks with their detections and mark the others lost, in place."""
        matched = (det_of_track >= 0).nonzero()[0]
        rows = det_of_track.take(matched)
        t.states[:, matched] = self._kf.update_states(t.states.take(matched, axis=1), z.take(rows, axis=1))
        t.last_seen_ns[matched] = pts_ns
        t.labels[matched], t.scores[matched] = labels.take(rows), scores.take(rows)
        if angles is not None:
            t.angles[matched] = angles[rows]
            t.sizes[:, matched] = (boxes[rows, 2:] - boxes[rows, :2]).T
        t.lost = det_of_track < 0
        t.hits = np.where(t.lost, 0, t.hits + 1)

    def _associate_all(
        self, t: TrackTable, z: FloatArray, scores: FloatArray, labels: IntArray
    ) -> tuple[IntArray, IntArray, IntArray]:
        """The ByteTrack stages on measured (envelope) boxes ``z``, (cx, cy, w, h) rows [4, N].

        Returns:
            track index per detection [N] and detection index per track [T], -1 where unmatched; the detections
            that start tracks.
        """
        track_of_det = np.full(len(scores), -1, dtype=np.int64)
        det_of_track = np.full(len(t), -1, dtype=np.int64)
        high = scores >= self.high_score
        if len(t) == 0 or len(scores) == 0:
            return track_of_det, det_of_track, self._starters(scores, high, track_of_det)
        xyxy = cxcywh_to_xyxy(np.concatenate([t.states[POS], z], axis=1).T)  # tracks' then detections', [T + N, 4]
        iou = iou_matrix_columns(xyxy.T, len(t))
        tr, de = iou.nonzero()  # only overlapping pairs need the gate: the others have IoU 0 anyway
        allowed = self._allowed(t, z, labels, tr, de)
        if np.count_nonzero(allowed) < len(allowed):
            iou[tr, de] *= allowed
        confirmed = t.ids >= 0
        first = iou * scores if self.fuse_score else iou
        confirmed_rows, high_cols = confirmed.nonzero()[0], high.nonzero()[0]
        matched = _match(first, confirmed_rows, high_cols, self.match_iou, track_of_det, det_of_track)
        # a later stage runs only if both its sides have someone left: counting is cheaper than finding out
        n_confirmed = len(confirmed_rows)
        free_confirmed, free_high = n_confirmed - matched, len(high_cols) - matched
        if free_confirmed and np.count_nonzero(scores >= self.low_score) > len(high_cols):
            low = (scores >= self.low_score) & ~high
            free_confirmed -= _match(iou, _free(confirmed, det_of_track), low.nonzero()[0], self.low_match_iou,
                                     track_of_det, det_of_track)
        if self.recover_sigmas > 0 and free_confirmed and free_high:
            def reach(rows: IntArray, cols: IntArray) -> FloatArray:
                pairs = rows.repeat(len(cols)), cols[None].repeat(len(rows), 0).ravel()  # np.tile, minus its wrapper
                gate = self._allowed(t, z, labels, *pairs).reshape(len(rows), len(cols))
                slack = self.recover_sigmas * np.sqrt(t.states[VAR][:2, rows].T)  # of the centre, [R, 2]
                return slack_iou_matrix(t.states[POS][:, rows].T, slack, z[:, cols].T) * gate

            free_high -= _match(reach, _free(confirmed, det_of_track), _free(high, track_of_det), self.recover_iou,
                                track_of_det, det_of_track)
        if free_high and n_confirmed < len(t):
            free_high -= _match(iou, (~confirmed).nonzero()[0], _free(high, track_of_det), self.tentative_match_iou,
                                track_of_det, det_of_track)
        starters = self._starters(scores, high, track_of_det) if free_high else np.zeros(0, dtype=np.int64)
        return track_of_det, det_of_track, starters

    def _starters(self, scores: FloatArray, high: BoolArray, track_of_det: IntArray) -> IntArray:
        """The high-score detections left that score enough to start tracks."""
        if self.new_track_score > self.high_score:
            high = scores >= self.new_track_score
        return _free(high, track_of_det)

    def _allowed(self, t: TrackTable, z: FloatArray, labels: IntArray, tr: IntArray, de: IntArray) -> BoolArray:
        """Whether detection ``de[k]`` may match track ``tr[k]``: the motion gate and, with ``per_class``, the
        label."""
        if self.motion_gate > 0:
            d2 = self._kf.mahalanobis_sq_states(t.states.take(tr, axis=1), z.take(de, axis=1))
            allowed = d2 <= self.motion_gate
        else:
            allowed = np.ones(len(tr), dtype=bool)
        if self.per_class:
            allowed &= t.labels.take(tr) == labels.take(de)
        return allowed

    def _spawn(self, z: FloatArray, boxes: FloatArray, scores: FloatArray, labels: IntArray,
               angles: FloatArray | None, rows: IntArray, pts_ns: int) -> TrackTable:
        """Tentative tracks for detections ``rows``."""
        k = len(rows)
        now = np.full(k, pts_ns, dtype=np.int64)
        return TrackTable(self._kf.initiate_states(z[:, rows]), np.full(k, -1, dtype=np.int64),
                          np.ones(k, dtype=np.int64), now, now.copy(), np.zeros(k, dtype=bool),
                          labels[rows].astype(np.int64), scores[rows], np.zeros(k) if angles is None else angles[rows],
                          (boxes[rows, 2:] - boxes[rows, :2]).T)

    def _confirm(self) -> None:
        """Give ids to the tentative tracks with ``min_hits``. A tentative track that misses a frame is dropped, so
        each is confirmed exactly ``min_hits - 1`` updates after it spawned: ids follow the table's (spawn) order,
        and the confirmed tracks stay sorted by id."""
        t = self._tracks
        for i in ((t.ids < 0) & (t.hits >= self.min_hits)).nonzero()[0]:
            t.ids[i] = next(self._next_id)

    def _result(self, dets: Detections, boxes: FloatArray, det_of_track: IntArray, pts_ns: int,
                ended: tuple[int, ...]) -> TrackResult:
        """Assemble the output; ``det_of_track`` is -1 for tracks whose box comes from ``boxes``, (cx, cy, w, h)
        rows [4, T] of the motion model."""
        t = self._tracks
        # a track with a detection this frame is not lost, and on predict_only frames none has one
        shown = (t.ids >= 0) & ~(t.lost & (t.last_seen_ns < pts_ns - self.coast_ns))
        predicted = shown & (det_of_track < 0)
        rows = np.where(predicted, predicted.cumsum() - 1, det_of_track)  # predicted boxes are numbered in order
        sel = shown.nonzero()[0]
        # the table's order is id order for confirmed tracks (see _confirm); the tuples are built in C
        states = tuple(map(TrackState._make, zip(
            t.ids[sel].tolist(), t.first_seen_ns[sel].tolist(), t.last_seen_ns[sel].tolist(), t.lost[sel].tolist(),
            predicted[sel].tolist(), rows[sel].tolist())))
        pred = predicted.nonzero()[0].tolist()
        return TrackResult(detections=dets, predicted=self._predicted(boxes, pred), tracks=states, ended_ids=ended)

    def _predicted(self, boxes: FloatArray, tracks: list[int]) -> Detections:
        """``TrackResult.predicted`` for ``tracks`` (columns of the motion model's ``boxes`` [4, T])."""
        if not tracks:
            return _no_rows(self._device, self._oriented)
        t, dev, pred = self._tracks, self._device, np.array(tracks)

        def as_tensor(a: npt.NDArray[np.generic], dtype: torch.dtype) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device=dev, dtype=dtype)

        # oriented: the filter follows the envelope; the unrotated box keeps its latest size around that centre
        box = np.concatenate([boxes[:2, pred], t.sizes[:, pred]]) if self._oriented else boxes[:, pred]
        return Detections.trusted(  # built here with the dtypes and rows checked Detections have
            boxes_xyxy=as_tensor(cxcywh_to_xyxy(box.T), torch.float32),
            scores=as_tensor(t.scores[pred], torch.float32),
            labels=as_tensor(t.labels[pred], torch.int64),
            angles_rad=as_tensor(t.angles[pred], torch.float32) if self._oriented else None,
            track_ids=as_tensor(t.ids[pred], torch.int64),
        )


@functools.lru_cache(maxsize=8)
def _no_rows(device: torch.device, oriented: bool) -> Detections:
    """Empty detections with empty ``track_ids``, built once per device: most frames have no predicted box, and
    building them cost a tenth of a frame's tracking. Shared, which is safe as they have no rows."""
    return Detections.empty(device, oriented=oriented).with_track_ids(torch.zeros(0, dtype=torch.int64, device=device))


def _free(mask: BoolArray, partner: IntArray) -> IntArray:
    """Indices where ``mask`` holds and ``partner`` is -1 (not matched yet)."""
    free: IntArray = (mask & (partner < 0)).nonzero()[0]
    return free


def _match(sim: FloatArray | Callable[[IntArray, IntArray], FloatArray], rows: IntArray, cols: IntArray,
           min_sim: float, track_of_det: IntArray, det_of_track: IntArray) -> int:
    """Match the free tracks ``rows`` with the free detections ``cols``; record the pairs in place, return their
    number.

    ``sim`` is the [T, N] similarity, or a function that computes its block for given tracks and detections (for a
    stage too costly to compute for every pair).
    """
    if len(rows) == 0 or len(cols) == 0:
        return 0
    if callable(sim):
        block = sim(rows, cols)
    elif len(rows) == sim.shape[0] and len(cols) == sim.shape[1]:
        block = sim
    else:
        block = sim[rows[:, None], cols]
    r, c = match_pairs(block, min_sim)
    tracks, dets = rows[r], cols[c]
    track_of_det[dets], det_of_track[tracks] = tracks, dets
    return len(r)
