"""ByteTrack (Zhang et al., ECCV 2022) on numpy: Kalman motion + IoU, associating every detection box.

Per frame, after the Kalman prediction: (1) confirmed tracks, tracked or lost, take the high-score detections
by IoU with their predicted boxes; (2) confirmed tracks still free take the low-score detections (an object
that is partly hidden often scores low: this is what keeps its id); (3) recovery: confirmed tracks still free
take the high-score detections left, their predicted centre allowed to move a few standard deviations first
(finds objects that turned while hidden); (4) confirmed tracks seen within ``gate_grace_s`` and still free take
the high-score detections left that the motion gate kept from them, if they overlap the box where the track was
last seen (``grace_iou``); (5) tentative tracks take the high-score
detections left; (6) the high-score detections still left start tentative tracks. Every stage is an optimal
(Hungarian) assignment, and all but (4) respect a Mahalanobis motion gate. Stage (4) is what keeps one track per
object where the motion model is surprised (a bounce off a wall, a sudden speed change, jitter on a small box):
without it the detection the gate rejects starts a second track next to the live one, and the two then share the
object's detections, its id flipping from frame to frame. Oriented boxes associate on the axis-aligned envelope of their rotated
corners, which is also what the Kalman filter follows (an OBB detector may swap width and height as the angle
wraps; the envelope does not), and keep their angle and unrotated size for predicted boxes.

Every update runs ``bytetrack_core`` for a batch of streams: ``ByteTrack.update`` is a batch of one, and
``update_streams`` updates the trackers of many streams (a pytracker per stream behind one batching pyinfer) at once.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import torch

from inferstream.detections import Detections
from inferstream.errors import ConfigError
from inferstream.tracking import bytetrack_core as core
from inferstream.tracking import bytetrack_native as native
from inferstream.tracking.base import Tracker, TrackResult
from inferstream.tracking.bytetrack_core import NS_PER_S, Settings, StreamState
from inferstream.tracking.kalman import KalmanNoise
from inferstream.tracking.table import TrackTable

_CPU = torch.device("cpu")


class _Batch(NamedTuple):
    """What the streams updated together share."""

    settings: Settings
    skipped: bool  # predict_only frames
    device: torch.device
    oriented: bool


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
        gate_grace_s: a confirmed track seen this recently (pts seconds) may still take a high-score detection
            the motion gate kept from it, before tentative tracks and new tracks take what is left, if the
            detection overlaps the box where the track was last seen: an object just seen is near there even when
            its motion surprised the model (a bounce, a speed change), and the alternative is a duplicate track
            on it. Tracks lost for longer stay gated (their predictions drift, and that is when a track would
            take a neighbour). 0 always gates.
        grace_iou: minimum IoU, for that stage, between the detection and the track's box where it was last
            seen (not its prediction, which is what the gate found wrong).
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
        gate_grace_s: float = 0.1,
        grace_iou: float = 0.2,
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
                      "tentative_match_iou": tentative_match_iou, "recover_iou": recover_iou, "grace_iou": grace_iou}
        for name, value in thresholds.items():
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"ByteTrack: {name} must be in [0, 1], got {value}")
        if low_score > high_score:
            raise ConfigError(f"ByteTrack: low_score ({low_score}) must not exceed high_score ({high_score})")
        if min(max_lost_s, coast_s, recover_sigmas, motion_gate, gate_grace_s) < 0 or min_hits < 1 or first_id < 0:
            raise ConfigError(f"ByteTrack: need max_lost_s, coast_s, recover_sigmas, motion_gate, gate_grace_s >= 0, "
                              f"min_hits >= 1, first_id >= 0; got {max_lost_s}, {coast_s}, {recover_sigmas}, "
                              f"{motion_gate}, {gate_grace_s}, {min_hits}, {first_id}")
        self.settings = Settings(
            high_score, low_score, new_track_score, match_iou, low_match_iou, tentative_match_iou, recover_sigmas,
            recover_iou, motion_gate, round(gate_grace_s * NS_PER_S), grace_iou, round(max_lost_s * NS_PER_S),
            round(coast_s * NS_PER_S), min_hits, per_class, fuse_score, kalman_noise if kalman_noise is not None else KalmanNoise())
        self._state = StreamState(TrackTable.empty(), None, None, first_id, _CPU, False)
        native.available()  # build or load the compiled update now (pytracker's start), not while a batch waits

    def reset(self) -> None:
        """Forget every track; ids keep counting, so this instance never reuses one."""
        self._state = StreamState(TrackTable.empty(), None, None, self._state.next_id, _CPU, False)

    def update(self, dets: Detections, pts_ns: int) -> TrackResult:
        """Associate one frame's detections with the tracks.

        Args:
            dets: this frame's detections, any device; rows below ``low_score`` are ignored, and so are malformed
                rows (NaN or infinite values, a width or height <= 0), counted in ``TrackResult.malformed``.
            pts_ns: the frame's pts in nanoseconds; must not be earlier than the previous call's.

        Returns:
            ``TrackResult`` with ``detections`` = ``dets`` (same rows and order) plus ``track_ids``.

        Raises:
            ValueError: ``pts_ns`` is negative or went backwards (call ``reset()`` after a seek).
        """
        self._check_time(pts_ns)
        (self._state,), (result,) = native.update(self.settings, [self._state], [dets], [pts_ns])
        return result

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
        (self._state,), (result,) = core.predict_only(self.settings, [self._state], [pts_ns])
        return result

    def _check_time(self, pts_ns: int) -> None:
        if pts_ns < 0:
            raise ValueError(f"pts_ns must be >= 0, got {pts_ns}")
        if self._state.now_ns is not None and pts_ns < self._state.now_ns:
            raise ValueError(f"pts_ns went backwards ({pts_ns} < {self._state.now_ns}); call reset() after a seek")


def update_streams(trackers: Sequence[Tracker], dets: Sequence[Detections | None],
                   pts_ns: Sequence[int]) -> list[TrackResult]:
    """Update the trackers of several streams, one frame each, as one batch: the same results and tracker states
    as ``trackers[i].update(dets[i], pts_ns[i])`` in turn, for a fraction of the host time.

    ``ByteTrack`` instances with equal settings whose detections share a device and orientation are updated
    together (``bytetrack_core``): numpy's per-call overhead, most of the cost of tracking tens of boxes, is paid
    once for all of them. Frames with ``dets[i] is None`` are frames the detector skipped (``predict_only``),
    batched the same way. Other trackers are updated one after the other, after the ByteTracks.

    Args:
        trackers: one tracker per stream, each at most once.
        dets: each stream's detections (any device), or None for a frame the detector skipped.
        pts_ns: each frame's pts in nanoseconds; must not be earlier than that tracker's previous call's.

    Returns:
        one ``TrackResult`` per stream, in the order given.

    Raises:
        ValueError: the sequences differ in length, a tracker appears twice, or a pts is negative or went backwards
            (raised before any tracker changed). Whatever the ByteTracks' batched update raises, it raises before
            any of them changed; trackers of other kinds update (and may raise) after it.
    """
    if not len(trackers) == len(dets) == len(pts_ns):
        raise ValueError(f"update_streams: {len(trackers)} trackers, {len(dets)} detections, {len(pts_ns)} pts")
    if len({id(t) for t in trackers}) < len(trackers):
        raise ValueError("update_streams: a tracker appears twice (give each stream's frames in separate calls)")
    groups: dict[_Batch, list[int]] = {}
    for i, (tracker, d, pts) in enumerate(zip(trackers, dets, pts_ns)):
        if isinstance(tracker, ByteTrack):
            tracker._check_time(pts)
            st = tracker._state
            where = (st.device, st.oriented) if d is None else (d.boxes_xyxy.device, d.oriented)
            groups.setdefault(_Batch(tracker.settings, d is None, *where), []).append(i)
    results: list[TrackResult | None] = [None] * len(trackers)
    commits: list[tuple[ByteTrack, StreamState]] = []
    for key, members in groups.items():
        batch = [cast(ByteTrack, trackers[i]) for i in members]
        states, times = [t._state for t in batch], [pts_ns[i] for i in members]
        if key.skipped:
            new_states, out = core.predict_only(key.settings, states, times)
        else:
            new_states, out = native.update(key.settings, states, [cast(Detections, dets[i]) for i in members], times)
        commits += zip(batch, new_states)
        for i, result in zip(members, out):
            results[i] = result
    for tracker, state in commits:
        tracker._state = state
    for i, (tracker, d, pts) in enumerate(zip(trackers, dets, pts_ns)):
        if results[i] is None:
            results[i] = tracker.predict_only(pts) if d is None else tracker.update(d, pts)
    return cast(list[TrackResult], results)
