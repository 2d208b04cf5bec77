"""ByteTrack's per-frame algorithm for the frames of several streams at once (one stream is a batch of one).

The streams' track tables are concatenated, and so are their detections, each grouped by stream (a stream index
per track and per detection), and every step runs once for all of them: the Kalman prediction (each stream with
its own time step), expiry, IoU and motion gate over the pairs *within* each stream (``StreamPairs``), the matching
stages (the Hungarian solver only for a stream whose candidates conflict), the correction, spawning, confirmation
and the results. At 30 streams this pays numpy's per-call overhead, the cost of tracking tens of boxes, once per
batch instead of 30 times; each stream's result is exactly what updating it alone gives.

Everything here is pure: it takes the streams' states and returns their new states and results, so a batch that
fails changes no tracker. ``ByteTrack`` (``bytetrack.py``) holds a stream's state and checks the inputs.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np
import numpy.typing as npt
import torch

from inferstream.detections import Detections
from inferstream.ops.boxes import cxcywh_to_xyxy, rotated_envelope_xyxy, xyxy_to_cxcywh
from inferstream.tracking.base import TrackColumns, TrackResult
from inferstream.tracking.geometry import iou_pairs, slack_iou_pairs
from inferstream.tracking.kalman import POS, RATE, VAR, ConstantVelocityKalman, KalmanNoise
from inferstream.tracking.matching import StreamPairs, match_pairs
from inferstream.tracking.stream_tracks import StreamTracks
from inferstream.tracking.table import TrackTable

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_Array = TypeVar("_Array", bound=npt.NDArray[Any])

NS_PER_S = 1_000_000_000
_NO_TRACK = np.array([-1])


@dataclass(frozen=True, slots=True)
class Settings:
    """ByteTrack's settings (see ``ByteTrack`` for their meaning); trackers with equal settings update together."""

    high_score: float
    low_score: float
    new_track_score: float
    match_iou: float
    low_match_iou: float
    tentative_match_iou: float
    recover_sigmas: float
    recover_iou: float
    motion_gate: float
    gate_grace_ns: int
    grace_iou: float
    max_lost_ns: int
    coast_ns: int
    min_hits: int
    per_class: bool
    fuse_score: bool
    noise: KalmanNoise


class StreamState(NamedTuple):
    """One stream's tracker between two frames (a named tuple: one is built per stream and frame)."""

    tracks: TrackTable
    state_ns: int | None  # time of the Kalman states (latest update)
    now_ns: int | None  # latest pts seen (update or predict_only)
    next_id: int  # the next confirmed track's id
    device: torch.device  # of the latest detections: results go there
    oriented: bool  # the latest detections had angles


def update(cfg: Settings, streams: list[StreamState], dets: list[Detections],
           pts_ns: list[int]) -> tuple[list[StreamState], list[TrackResult]]:
    """One frame per stream: ``dets[s]`` at ``pts_ns[s]``, times already checked, every ``dets`` on one device and
    all oriented or none. Returns the streams' new states and their results."""
    kf = _kalman(cfg.noise)
    b = StreamTracks.gather(streams, pts_ns)
    b.table = b.table.with_states(kf.predict_states(b.table.states, _time_steps(streams, pts_ns, b.stream)))
    ended = b.expire(cfg.max_lost_ns, len(streams))
    d_counts = np.array([len(d) for d in dets], dtype=np.int64)
    boxes, scores, labels, angles = _host_arrays(dets)
    d_stream = np.arange(len(streams)).repeat(d_counts) if len(streams) > 1 else np.zeros(len(dets[0]), np.int64)
    # what the filter measures, (cx, cy, w, h) rows [4, N]
    z = xyxy_to_cxcywh(boxes if angles is None else rotated_envelope_xyxy(boxes, angles)).T.copy()
    malformed = _neutralise_malformed(z, boxes, scores, angles)
    pairs = StreamPairs(np.bincount(b.stream, minlength=len(streams)), d_counts)
    track_of_det, det_of_track, new = _associate(cfg, kf, b.table, b.pts, pairs, z, scores, labels)
    b.table = _correct(kf, b.table, det_of_track, z, boxes, scores, labels, angles, b.pts)
    dropped = b.table.lost & (b.table.ids < 0)  # a tentative track that misses a frame is dropped
    if np.count_nonzero(dropped):
        keep = ~dropped
        b.keep(keep)
        det_of_track = det_of_track[keep]
        has = track_of_det >= 0
        track_of_det[has] = (keep.cumsum() - 1)[track_of_det[has]]  # matched tracks are all kept
    if len(new):
        det_of_track = b.spawn(kf, z, boxes, scores, labels, angles, new, d_stream, np.array(pts_ns),
                               track_of_det, det_of_track)
    next_ids = b.confirm(cfg.min_hits, [s.next_id for s in streams])
    ids = np.concatenate([b.table.ids, _NO_TRACK]).take(track_of_det)  # index -1: the appended -1
    device, oriented = dets[0].boxes_xyxy.device, angles is not None
    ids_t = torch.from_numpy(ids).to(device)
    starts = np.concatenate([[0], d_counts.cumsum()]).tolist() if len(dets) > 1 else [0, len(ids)]
    outs = [d.with_track_ids(ids_t[a:b] if len(dets) > 1 else ids_t) for d, a, b in zip(dets, starts, starts[1:])]
    results = _results(cfg, b, b.table.states[POS], det_of_track, d_stream, outs, ended, device, oriented)
    if malformed is not None:
        counts = np.bincount(d_stream[malformed], minlength=len(streams)).tolist()
        results = [dataclasses.replace(r, malformed=n) if n else r for r, n in zip(results, counts)]
    new_states = [StreamState(table, p, p, n, device, oriented)
                  for table, p, n in zip(b.split(len(streams)), pts_ns, next_ids)]
    return new_states, results


def predict_only(cfg: Settings, streams: list[StreamState],
                 pts_ns: list[int]) -> tuple[list[StreamState], list[TrackResult]]:
    """Frames the detector skipped, one per stream (times already checked, streams on one device and all oriented
    or none): the tracks carried forward by their motion model; the filter states stay as of the last update."""
    b = StreamTracks.gather(streams, pts_ns)
    ended = b.expire(cfg.max_lost_ns, len(streams))
    boxes = _kalman(cfg.noise).predict_boxes(b.table.states, _time_steps(streams, pts_ns, b.stream))
    device, oriented = streams[0].device, streams[0].oriented
    outs = [_no_rows(device, oriented)] * len(streams)
    no_dets = np.full(len(b.table), -1, dtype=np.int64)
    results = _results(cfg, b, boxes, no_dets, np.zeros(0, dtype=np.int64), outs, ended, device, oriented)
    new_states = [StreamState(table, s.state_ns, p, s.next_id, s.device, s.oriented)
                  for table, s, p in zip(b.split(len(streams)), streams, pts_ns)]
    return new_states, results


@functools.lru_cache(maxsize=8)
def _kalman(noise: KalmanNoise) -> ConstantVelocityKalman:
    """The (stateless) filter for ``noise``, built once."""
    return ConstantVelocityKalman(noise)


def _time_steps(streams: list[StreamState], pts_ns: list[int], stream: IntArray) -> float | FloatArray:
    """Seconds since each stream's last update: one number when all streams share it, else one per track."""
    dts = [0.0 if s.state_ns is None else (p - s.state_ns) / NS_PER_S for s, p in zip(streams, pts_ns)]
    if dts.count(dts[0]) == len(dts):
        return dts[0]
    return np.array(dts).take(stream)


def _host_arrays(dets: list[Detections]) -> tuple[FloatArray, FloatArray, IntArray, FloatArray | None]:
    """Every stream's boxes [N, 4], scores [N], labels [N] and angles [N] (or None), float64 on the host, one
    device-to-host copy per field."""
    if len(dets) == 1:
        d = dets[0]
        boxes, scores, labels, angles_rad = d.boxes_xyxy, d.scores, d.labels, d.angles_rad
    else:
        boxes, scores, labels = (torch.cat([d.boxes_xyxy for d in dets]), torch.cat([d.scores for d in dets]),
                                 torch.cat([d.labels for d in dets]))
        angles_rad = None if dets[0].angles_rad is None else torch.cat([cast(torch.Tensor, d.angles_rad) for d in dets])
    angles = None if angles_rad is None else angles_rad.numpy(force=True).astype(np.float64)
    return (boxes.numpy(force=True).astype(np.float64), scores.numpy(force=True).astype(np.float64),
            labels.numpy(force=True), angles)


def _neutralise_malformed(z: FloatArray, boxes: FloatArray, scores: FloatArray,
                          angles: FloatArray | None) -> BoolArray | None:
    """The rows no stage may take: a NaN or infinite coordinate, score or angle, or a width or height <= 0 (None
    when there is none: the usual case, told by three reductions, as ``z`` [4, N], the measured boxes, carries
    every coordinate and angle, and axis-aligned boxes' sizes). Their boxes and measurements become zeros and their
    scores -inf, in place, so they match no track, start none, and no NaN reaches a filter state."""
    if math.isfinite(z.sum() + scores.sum()) and z[2:].min(initial=1.0) > 0 and angles is None:
        return None
    wh = boxes[:, 2:] - boxes[:, :2]  # oriented: the envelope of a negative size can be positive
    bad: BoolArray = ~(np.isfinite(z).all(axis=0) & (wh > 0).all(axis=1) & np.isfinite(scores))
    if not bad.any():
        return None
    if angles is not None:
        angles[bad] = 0.0
    boxes[bad], z[:, bad], scores[bad] = 0.0, 0.0, -np.inf
    return bad


def _correct(kf: ConstantVelocityKalman, t: TrackTable, det_of_track: IntArray, z: FloatArray, boxes: FloatArray,
             scores: FloatArray, labels: IntArray, angles: FloatArray | None, pts: IntArray) -> TrackTable:
    """The tracks after Kalman-correcting the matched ones with their detections and marking the others lost (a
    new table: the input's arrays may be a stream's stored state)."""
    matched = (det_of_track >= 0).nonzero()[0]
    rows = det_of_track.take(matched)
    states = t.states  # predict_states' copy
    states[:, matched] = kf.update_states(states.take(matched, axis=1), z.take(rows, axis=1))

    angle, size = t.angles, t.sizes
    if angles is not None:
        angle, size = _put(angle, matched, angles[rows]), _put(size, matched, (boxes[rows, 2:] - boxes[rows, :2]).T)
    lost = det_of_track < 0
    return TrackTable(states, t.ids, np.where(lost, 0, t.hits + 1), t.first_seen_ns,
                      np.where(lost, t.last_seen_ns, pts), lost, _put(t.labels, matched, labels.take(rows)),
                      _put(t.scores, matched, scores.take(rows)), angle, size)


def _put(values: _Array, at: IntArray, new: npt.NDArray[Any]) -> _Array:
    """A copy of ``values`` with the tracks (last axis) ``at`` set to ``new``."""
    out = values.copy()
    out[..., at] = new
    return out


def _associate(cfg: Settings, kf: ConstantVelocityKalman, t: TrackTable, now: IntArray, pairs: StreamPairs,
               z: FloatArray, scores: FloatArray, labels: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """The ByteTrack stages on measured (envelope) boxes ``z``, (cx, cy, w, h) rows [4, N], within each stream;
    ``now`` [T] is each track's frame time.

    Returns:
        track index per detection [N] and detection index per track [T], -1 where unmatched; the detections
        that start tracks.
    """
    track_of_det = np.full(len(scores), -1, dtype=np.int64)
    det_of_track = np.full(len(t), -1, dtype=np.int64)
    high = scores >= cfg.high_score
    if len(pairs) == 0:
        return track_of_det, det_of_track, _starters(cfg, scores, high, track_of_det)
    n = len(t)
    # tracks' then detections' [4, T + N], contiguous rows: numpy broadcasts slowly over strided ones
    edges = np.ascontiguousarray(cxcywh_to_xyxy(np.concatenate([t.states[POS], z], axis=1).T).T)
    iou = pairs.pairwise(iou_pairs, edges[:, :n], edges[:, n:])
    nz = iou.nonzero()[0]  # only overlapping pairs need the gate: the others have IoU 0 anyway
    tr, de = pairs.locate(nz)
    allowed = _allowed(cfg, kf, t, z, labels, tr, de)
    gated = None  # the pairs the motion gate removed, as (track, detection) indices
    if np.count_nonzero(allowed) < len(allowed):
        out = ~allowed
        gated = tr[out], de[out]
        iou[nz] *= allowed

    def match(sim: FloatArray, row_ok: BoolArray, col_ok: BoolArray, min_sim: float) -> int:
        tracks, dets = pairs.match(sim, row_ok, col_ok, min_sim)
        track_of_det[dets], det_of_track[tracks] = tracks, dets
        return len(tracks)

    confirmed = t.ids >= 0
    n_confirmed, n_high = np.count_nonzero(confirmed), np.count_nonzero(high)
    first = iou * pairs.pairwise(np.multiply, np.ones((1, n)), scores[None]) if cfg.fuse_score else iou  # IoU x score
    matched = match(first, confirmed, high, cfg.match_iou)
    # a later stage runs only if both its sides have someone left: counting is cheaper than finding out
    free_confirmed, free_high = n_confirmed - matched, n_high - matched
    if free_confirmed and np.count_nonzero(scores >= cfg.low_score) > n_high:
        low = (scores >= cfg.low_score) & ~high
        free_confirmed -= match(iou, confirmed & (det_of_track < 0), low, cfg.low_match_iou)
    if cfg.recover_sigmas > 0 and free_confirmed and free_high:
        rows_ok, cols_ok = confirmed & (det_of_track < 0), high & (track_of_det < 0)
        sub = pairs.select(rows_ok, cols_ok)
        tr, de = pairs.locate(sub)
        gate = _allowed(cfg, kf, t, z, labels, tr, de)
        slack = cfg.recover_sigmas * np.sqrt(t.states[VAR][:2].take(tr, axis=1))  # of the centre, [2, K]
        reach = np.zeros(len(pairs))
        reach[sub] = slack_iou_pairs(t.states[POS].take(tr, axis=1), slack, z.take(de, axis=1)) * gate
        free_high -= match(reach, rows_ok, cols_ok, cfg.recover_iou)
    if cfg.gate_grace_ns and gated is not None and free_high:  # a recently seen track may overrule its gate
        rows_ok, cols_ok = confirmed & (det_of_track < 0) & (t.last_seen_ns >= now - cfg.gate_grace_ns), high & (
            track_of_det < 0)
        free = (rows_ok.take(gated[0]) & cols_ok.take(gated[1])).nonzero()[0]
        if len(free):
            tracks, dets = _grace_match(cfg, t, now, edges[:, n:], labels, gated[0].take(free), gated[1].take(free))
            track_of_det[dets], det_of_track[tracks] = tracks, dets
            free_high -= len(tracks)
    if free_high and n_confirmed < n:
        free_high -= match(iou, ~confirmed, high & (track_of_det < 0), cfg.tentative_match_iou)
    starters = _starters(cfg, scores, high, track_of_det) if free_high else np.zeros(0, dtype=np.int64)
    return track_of_det, det_of_track, starters


def _grace_match(cfg: Settings, t: TrackTable, now: IntArray, det_edges: FloatArray, labels: IntArray, tr: IntArray,
                 de: IntArray) -> tuple[IntArray, IntArray]:
    """Stage (4) on the pairs ``(tr[k], de[k])`` the motion gate removed between free tracks and free detections:
    the optimal matching, at ``grace_iou``, by the IoU of each detection (``det_edges``, xyxy rows [4, N]) with
    its track's box where it was last seen (its Kalman estimate then: the prediction run back). What the motion
    model got wrong does not count there, while a box that merely grazes the prediction (a false positive next to
    a track whose object was missed) is far from where the object was. Returns matched tracks and detections."""
    back = (now.take(tr) - t.last_seen_ns.take(tr)) / NS_PER_S  # [K] seconds
    last = t.states[POS].take(tr, axis=1) - back * t.states[RATE].take(tr, axis=1)
    sim = iou_pairs(cxcywh_to_xyxy(last.T).T, det_edges.take(de, axis=1))
    if cfg.per_class:
        sim *= t.labels.take(tr) == labels.take(de)
    ok = (sim >= cfg.grace_iou).nonzero()[0]
    tr, de = tr.take(ok), de.take(ok)
    if len(ok) < 2 or (np.bincount(tr).max() < 2 and np.bincount(de).max() < 2):
        return tr, de  # no track or detection with two candidates: all of them is the optimum
    # a track and a detection pair up only within their stream, so one solve over every stream's pairs (the
    # other cells -1: no candidate even at grace_iou 0) is each stream's optimum
    rows, row_at = np.unique(tr, return_inverse=True)
    cols, col_at = np.unique(de, return_inverse=True)
    block = np.full((len(rows), len(cols)), -1.0)
    block[row_at, col_at] = sim.take(ok)
    r, c = match_pairs(block, cfg.grace_iou)
    return rows.take(r), cols.take(c)


def _starters(cfg: Settings, scores: FloatArray, high: BoolArray, track_of_det: IntArray) -> IntArray:
    """The high-score detections left that score enough to start tracks."""
    if cfg.new_track_score > cfg.high_score:
        high = scores >= cfg.new_track_score
    free: IntArray = (high & (track_of_det < 0)).nonzero()[0]
    return free


def _allowed(cfg: Settings, kf: ConstantVelocityKalman, t: TrackTable, z: FloatArray, labels: IntArray,
             tr: IntArray, de: IntArray) -> BoolArray:
    """Whether detection ``de[k]`` may match track ``tr[k]``: the motion gate and, with ``per_class``, the label."""
    if cfg.motion_gate > 0:
        d2 = kf.mahalanobis_sq_states(t.states.take(tr, axis=1), z.take(de, axis=1))
        allowed: BoolArray = d2 <= cfg.motion_gate
    else:
        allowed = np.ones(len(tr), dtype=bool)
    if cfg.per_class:
        allowed &= t.labels.take(tr) == labels.take(de)
    return allowed


def _results(cfg: Settings, b: StreamTracks, boxes: FloatArray, det_of_track: IntArray, d_stream: IntArray,
             outs: list[Detections], ended: list[tuple[int, ...]], device: torch.device,
             oriented: bool) -> list[TrackResult]:
    """Each stream's ``TrackResult``; ``det_of_track`` is -1 for tracks whose box comes from ``boxes``,
    (cx, cy, w, h) rows [4, T] of the motion model, and ``outs`` are the streams' detections with ids."""
    t, n_streams = b.table, len(outs)
    # a track with a detection this frame is not lost, and on predict_only frames none has one
    shown = (t.ids >= 0) & ~(t.lost & (t.last_seen_ns < b.pts - cfg.coast_ns))
    predicted = shown & (det_of_track < 0)
    rows = np.where(predicted, predicted.cumsum() - 1, det_of_track)  # predicted boxes are numbered in order
    sel = shown.nonzero()[0]
    pred = predicted.nonzero()[0]
    if n_streams > 1:  # number each stream's predicted boxes and detections from 0
        starts = np.searchsorted(b.stream, np.arange(n_streams + 1))  # each stream's first track
        pred_before = np.concatenate([[0], predicted.cumsum()]).take(starts)
        rows -= np.where(predicted, pred_before.take(b.stream), np.searchsorted(d_stream, b.stream))
    # the table's order is id order for confirmed tracks (see StreamTracks.confirm)
    columns = TrackColumns(t.ids[sel], t.first_seen_ns[sel], t.last_seen_ns[sel], t.lost[sel], predicted[sel],
                           rows[sel])
    boxes_out = _predicted(t, boxes, pred, device, oriented)
    if n_streams == 1:
        return [TrackResult(detections=outs[0], predicted=boxes_out, columns=columns, ended_ids=ended[0])]
    shown_at, pred_at = np.concatenate([[0], shown.cumsum()]).take(starts).tolist(), pred_before.tolist()
    return [TrackResult(detections=out, columns=columns.slice(shown_at[s], shown_at[s + 1]), ended_ids=ended[s],
                        predicted=_rows(boxes_out, pred_at[s], pred_at[s + 1], device, oriented))
            for s, out in enumerate(outs)]


def _rows(dets: Detections, start: int, stop: int, device: torch.device, oriented: bool) -> Detections:
    """Rows ``start:stop`` of ``dets``."""
    return dets[start:stop] if start < stop else _no_rows(device, oriented)


def _predicted(t: TrackTable, boxes: FloatArray, pred: IntArray, device: torch.device,
               oriented: bool) -> Detections:
    """``TrackResult.predicted`` rows for tracks ``pred`` (columns of the motion model's ``boxes`` [4, T])."""
    if not len(pred):
        return _no_rows(device, oriented)

    def as_tensor(a: npt.NDArray[np.generic], dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

    # oriented: the filter follows the envelope; the unrotated box keeps its latest size around that centre
    box = np.concatenate([boxes[:2, pred], t.sizes[:, pred]]) if oriented else boxes[:, pred]
    return Detections.trusted(  # built here with the dtypes and rows checked Detections have
        boxes_xyxy=as_tensor(cxcywh_to_xyxy(box.T), torch.float32),
        scores=as_tensor(t.scores[pred], torch.float32),
        labels=as_tensor(t.labels[pred], torch.int64),
        angles_rad=as_tensor(t.angles[pred], torch.float32) if oriented else None,
        track_ids=as_tensor(t.ids[pred], torch.int64),
    )


@functools.lru_cache(maxsize=8)
def _no_rows(device: torch.device, oriented: bool) -> Detections:
    """Empty detections with empty ``track_ids``, built once per device: most frames have no predicted box, and
    building them cost a tenth of a frame's tracking. Shared, which is safe as they have no rows."""
    return Detections.empty(device, oriented=oriented).with_track_ids(torch.zeros(0, dtype=torch.int64, device=device))
