"""What every tracker offers the pytracker element, and what it returns.

One tracker instance serves one stream. Time is the buffer's pts in nanoseconds (``GstClockTime``), because
``GstAnalytics`` TrackingMtd records ``first_seen`` / ``last_seen`` as clock times.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from inferstream.detections import Detections


class TrackState(NamedTuple):
    """One confirmed track as of this frame: what a ``GstAnalyticsTrackingMtd`` needs. (A named tuple: trackers
    build one per track and frame, three times faster than a frozen dataclass.)

    Attributes:
        track_id: the track's id (>= the tracker's ``first_id``; never reused by the same tracker instance).
        first_seen_ns: pts of the frame where the track's first detection was seen.
        last_seen_ns: pts of the latest frame where a detection was matched to the track.
        lost: the detector's latest frame did not find the track (it is coasting on its motion model).
        predicted: this frame's box comes from the motion model, not from a detection: true for lost tracks
            and for every track on a ``predict_only`` frame.
        row: where this frame's box is: index into ``TrackResult.detections`` when ``predicted`` is false,
            into ``TrackResult.predicted`` when it is true.
    """

    track_id: int
    first_seen_ns: int
    last_seen_ns: int
    lost: bool
    predicted: bool
    row: int


class TrackColumns(NamedTuple):
    """``TrackResult.tracks`` as arrays, one entry per track in the same order: what the metadata writers read,
    with no object built per track and frame.

    Attributes:
        track_ids (ndarray[K] int64), first_seen_ns (ndarray[K] int64), last_seen_ns (ndarray[K] int64),
        lost (ndarray[K] bool), predicted (ndarray[K] bool), rows (ndarray[K] int64): ``TrackState``'s fields.
    """

    track_ids: npt.NDArray[np.int64]
    first_seen_ns: npt.NDArray[np.int64]
    last_seen_ns: npt.NDArray[np.int64]
    lost: npt.NDArray[np.bool_]
    predicted: npt.NDArray[np.bool_]
    rows: npt.NDArray[np.int64]

    def states(self) -> tuple[TrackState, ...]:
        """One ``TrackState`` per track."""
        return tuple(map(TrackState._make, zip(*(a.tolist() for a in self))))

    def slice(self, start: int, stop: int) -> TrackColumns:
        """Tracks ``start:stop`` (views)."""
        return TrackColumns(self.track_ids[start:stop], self.first_seen_ns[start:stop], self.last_seen_ns[start:stop],
                            self.lost[start:stop], self.predicted[start:stop], self.rows[start:stop])


@dataclass(frozen=True, slots=True)
class TrackResult:
    """One frame's tracking output.

    Attributes:
        detections: the input detections, same rows in the same order (row i stays row i, so it stays paired
            with ODMtd i), with ``track_ids`` (int64 [N]) set: the confirmed track the row belongs to, or -1
            (below the tracker's lowest score, not matched, or a track not confirmed yet). Empty on a
            ``predict_only`` frame.
        predicted: one row per confirmed track reported without a detection on this frame (every track on a
            ``predict_only`` frame; a lost track only for a short while, ByteTrack's ``coast_s``): its
            motion-model box (``boxes_xyxy``, unrotated for oriented boxes, with ``angles_rad`` when the stream
            is oriented), the label and score of its latest detection, and ``track_ids``. Same device as the
            last input.
        columns: every confirmed track with a box on this frame (a row in ``detections`` or in ``predicted``), in
            ascending ``track_id`` order, as arrays; ``tracks`` gives them as ``TrackState``s. Tracks kept alive
            silently (lost longer than the coasting time, or not yet confirmed) are not listed.
        ended_ids: ids of confirmed tracks the tracker dropped during this call (lost for too long), ascending.
        malformed: input rows the tracker could not use (a NaN or infinite coordinate, score or angle, or a width
            or height <= 0): they keep track id -1 and change no track.
    """

    detections: Detections
    predicted: Detections
    columns: TrackColumns
    ended_ids: tuple[int, ...] = ()
    malformed: int = 0

    @property
    def tracks(self) -> tuple[TrackState, ...]:
        """``columns`` as one ``TrackState`` per track (built on each access)."""
        return self.columns.states()


class Tracker(Protocol):
    """A multi-object tracker for one stream. Ids come from the instance, never from class state."""

    def update(self, dets: Detections, pts_ns: int) -> TrackResult:
        """Associate one frame's detections (any device) with the tracks; ``pts_ns`` must not go backwards."""
        ...

    def predict_only(self, pts_ns: int) -> TrackResult:
        """Carry the tracks forward to a frame the detector skipped, without changing their filter state."""
        ...

    def reset(self) -> None:
        """Forget every track (after a seek or flush); ids keep counting, so none is ever reused."""
        ...
