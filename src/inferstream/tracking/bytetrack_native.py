"""``bytetrack_core.update`` compiled: the same function (same stages, formulas and order, hence the same tracks,
ids and boxes) with each stream's frame updated by one C loop (``bytetrack.c``, built by ``native.cc``).

At tens of boxes per frame numpy's per-call overhead is nearly all of ByteTrack's cost, and the tracker held the
largest share of a GPU worker's GIL; in C the arithmetic is what is left. Where no C compiler exists, ``update``
is ``bytetrack_core.update`` (``native.cc`` logs that once). What stays in Python is the interface: the streams'
track tables in and out (``TrackTable``, so ``predict_only`` and ``reset`` are unchanged) and the results.
"""
from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inferstream.detections import Detections
from inferstream.ops.boxes import rotated_envelope_xyxy, xyxy_to_cxcywh
from inferstream.tracking import bytetrack_core as core
from inferstream.tracking.base import TrackColumns, TrackResult
from inferstream.tracking.bytetrack_core import NS_PER_S, Settings, StreamState
from inferstream.tracking.kalman import STATE_ROWS
from inferstream.tracking.table import TrackTable

_F64, _I64 = np.dtype(np.float64).itemsize, np.dtype(np.int64).itemsize
_log = logging.getLogger(__name__)


_D4 = ctypes.c_double * 4


class _Cfg(ctypes.Structure):
    """``Settings`` as ``bytetrack.c``'s ``Cfg``: the thresholds, the Kalman noise terms, the times and flags."""

    _fields_ = [
        *((name, ctypes.c_double) for name in ("high", "low", "new_track", "match_iou", "low_iou", "tentative_iou",
                                               "recover_sigmas", "recover_iou", "gate", "grace_iou")),
        ("unit_std", _D4), ("pos_var", ctypes.c_double), ("rate_var", _D4), ("min_size", ctypes.c_double),
        ("initial_velocity", ctypes.c_double),
        *((name, ctypes.c_int64) for name in ("grace_ns", "max_lost_ns", "coast_ns", "min_hits", "per_class",
                                              "fuse_score")),
    ]


class _Table(ctypes.Structure):
    """A track table as the C side reads it: ``TrackTable``'s fields as addresses, the states' row stride."""

    _fields_ = [(name, ctypes.c_void_p) for name in (
        "states", "ids", "hits", "first", "last", "lost", "labels", "scores", "angles", "sizes")] + [
        ("stride", ctypes.c_int64)]


@functools.cache
def _lib() -> Any:
    """``bt_update``, or None where it cannot be built."""
    from inferstream.native.cc import load_c

    try:
        source = Path(__file__).with_name("bytetrack.c").read_text()
    except OSError as exc:  # an install that left the source out
        _log.warning("ByteTrack runs on numpy: %s", exc)
        return None
    lib = load_c("inferstream_bytetrack", source)
    if lib is None:
        return None
    fn = lib.bt_update
    vp = ctypes.c_void_p
    fn.argtypes = (vp, ctypes.c_int, vp, vp, vp, vp, vp, ctypes.c_int64, vp, vp, vp, vp, vp, vp, vp)
    fn.restype = ctypes.c_int
    return fn


def available() -> bool:
    """Whether the compiled update runs here."""
    return _lib() is not None


@functools.lru_cache(maxsize=8)
def _cfg(cfg: Settings) -> _Cfg:
    kf = core._kalman(cfg.noise)
    n = cfg.noise
    return _Cfg(cfg.high_score, cfg.low_score, cfg.new_track_score, cfg.match_iou, cfg.low_match_iou,
                cfg.tentative_match_iou, cfg.recover_sigmas, cfg.recover_iou, cfg.motion_gate, cfg.grace_iou,
                _D4(*kf._measurement_unit_std[:, 0].tolist()), kf._process_unit_var,
                _D4(*kf._rate_process_unit_var[:, 0].tolist()), n.min_size_px, n.initial_velocity,
                cfg.gate_grace_ns, cfg.max_lost_ns, cfg.coast_ns, cfg.min_hits, int(cfg.per_class), int(cfg.fuse_score))


def _packed(tables: list[TrackTable], count: int) -> tuple[_Table, tuple[np.ndarray, ...]]:
    """The streams' tracks side by side in three buffers (float64, int64, bool) and the C view of them."""
    f, i, b = np.empty(24 * count), np.empty(5 * count, dtype=np.int64), np.empty(count, dtype=bool)
    TrackTable.join(tables, out=TrackTable(*_views(f, i, b, count)))
    return _c_table(f, i, b, count), (f, i, b)


def _views(f: np.ndarray, i: np.ndarray, b: np.ndarray, cap: int) -> list[np.ndarray]:
    """``TrackTable``'s fields as views of the buffers, in its field order."""
    return [f[:STATE_ROWS * cap].reshape(STATE_ROWS, cap), i[:cap], i[cap:2 * cap], i[2 * cap:3 * cap],
            i[3 * cap:4 * cap], b, i[4 * cap:5 * cap], f[20 * cap:21 * cap], f[21 * cap:22 * cap],
            f[22 * cap:24 * cap].reshape(2, cap)]


def _c_table(f: np.ndarray, i: np.ndarray, b: np.ndarray, cap: int) -> _Table:
    fa, ia = f.ctypes.data, i.ctypes.data
    return _Table(fa, ia, ia + cap * _I64, ia + 2 * cap * _I64, ia + 3 * cap * _I64, b.ctypes.data,
                  ia + 4 * cap * _I64, fa + 20 * cap * _F64, fa + 21 * cap * _F64, fa + 22 * cap * _F64, cap)


def update(cfg: Settings, streams: list[StreamState], dets: list[Detections],
           pts_ns: list[int]) -> tuple[list[StreamState], list[TrackResult]]:
    """``bytetrack_core.update``, compiled where a C compiler exists (same arguments, same results)."""
    fn = _lib()
    if fn is None:
        return core.update(cfg, streams, dets, pts_ns)
    n_streams = len(streams)
    tables = [s.tracks for s in streams]
    n_tracks = sum(len(t) for t in tables)
    c_in, keep_alive = _packed(tables, n_tracks)
    boxes, scores, labels, angles = core._host_arrays(dets)
    z = xyxy_to_cxcywh(boxes if angles is None else rotated_envelope_xyxy(boxes, angles)).T.copy()
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    d_counts = [len(d) for d in dets]
    n, cap = len(scores), n_tracks + len(scores)
    meta = np.array([(p, len(t), c, s.next_id) for s, t, c, p in zip(streams, tables, d_counts, pts_ns)],
                    dtype=np.int64).reshape(-1)
    dt = np.array([0.0 if s.state_ns is None else (p - s.state_ns) / NS_PER_S for s, p in zip(streams, pts_ns)])
    of, oi, ob = np.empty(24 * cap), np.empty(5 * cap, dtype=np.int64), np.empty(cap, dtype=bool)
    ri = np.empty(n + n_tracks + 6 * cap + 4 * n_streams, dtype=np.int64)
    rb, rf = np.empty(n + 2 * cap, dtype=bool), np.empty(6 * cap, dtype=np.float32)
    c_out = _c_table(of, oi, ob, cap)
    failed = fn(ctypes.byref(_cfg(cfg)), n_streams, meta.ctypes.data, dt.ctypes.data, ctypes.byref(c_in),
                boxes.ctypes.data, z.ctypes.data, n, scores.ctypes.data, labels.ctypes.data,
                None if angles is None else angles.ctypes.data, ctypes.byref(c_out),
                ri.ctypes.data, rb.ctypes.data, rf.ctypes.data)
    del keep_alive
    if failed:
        raise MemoryError("ByteTrack: out of memory for the batch's scratch")
    return _unpack(streams, dets, pts_ns, meta, (of, oi, ob), ri, rb, rf, n, n_tracks, cap, angles is not None)


def _unpack(streams: list[StreamState], dets: list[Detections], pts_ns: list[int], meta: np.ndarray,
            table: tuple[np.ndarray, np.ndarray, np.ndarray], ri: np.ndarray, rb: np.ndarray, rf: np.ndarray,
            n: int, n_tracks: int, cap: int, oriented: bool) -> tuple[list[StreamState], list[TrackResult]]:
    """The streams' new states and results from ``bt_update``'s outputs (layouts in ``bytetrack.c``): every
    field is built once for the batch and split into the streams' views."""
    n_streams = len(streams)
    det_ids, ended = ri[:n], ri[n:n + n_tracks]
    shown_id, shown_first, shown_last, shown_row, pred_label, pred_id = (
        ri[n + n_tracks + k * cap:n + n_tracks + (k + 1) * cap] for k in range(6))
    counts = ri[n + n_tracks + 6 * cap:].reshape(n_streams, 4).T.tolist()  # tracks, ended, shown, predicted
    bad, shown_lost, shown_pred = rb[:n], rb[n:n + cap], rb[n + cap:]
    device = dets[0].boxes_xyxy.device
    d_counts = [len(d) for d in dets]
    ids = torch.from_numpy(det_ids).to(device).split(d_counts)
    columns = TrackColumns(shown_id, shown_first, shown_last, shown_lost, shown_pred, shown_row)
    predicted = _predicted(rf, pred_label, pred_id, counts[3], cap, device, oriented)
    fields = _views(*table, cap)
    malformed = [0] * n_streams
    if bad.any():
        malformed = np.bincount(np.arange(n_streams).repeat(d_counts)[bad], minlength=n_streams).tolist()
    new_states, results = [], []
    o0 = e0 = r0 = 0
    for s, (d, d_ids, pred) in enumerate(zip(dets, ids, predicted)):
        o1, e1, r1 = o0 + counts[0][s], e0 + counts[1][s], r0 + counts[2][s]
        new_states.append(StreamState(TrackTable(*[f[..., o0:o1] for f in fields]), pts_ns[s], pts_ns[s],
                                      int(meta[4 * s + 3]), device, oriented))
        results.append(TrackResult(
            detections=Detections.trusted(d.boxes_xyxy, d.scores, d.labels, d.angles_rad, d_ids, d.masks, d.keypoints),
            predicted=pred, columns=columns.slice(r0, r1), ended_ids=tuple(ended[e0:e1].tolist()) if e1 > e0 else (),
            malformed=malformed[s]))
        o0, e0, r0 = o1, e1, r1
    return new_states, results


def _predicted(rf: np.ndarray, labels: np.ndarray, ids: np.ndarray, counts: list[int], cap: int,
               device: torch.device, oriented: bool) -> list[Detections]:
    """Each stream's predicted boxes (``TrackResult.predicted``), views of one batch-wide set."""
    total = sum(counts)
    if not total:
        return [core._no_rows(device, oriented)] * len(counts)

    def as_tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device)

    return Detections.trusted(
        boxes_xyxy=as_tensor(rf[:4 * total].reshape(total, 4)), scores=as_tensor(rf[4 * cap:4 * cap + total]),
        labels=as_tensor(labels[:total]), angles_rad=as_tensor(rf[5 * cap:5 * cap + total]) if oriented else None,
        track_ids=as_tensor(ids[:total])).split(counts)
