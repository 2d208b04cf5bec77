"""Where tracking runs: one stream's tracker (``TrackStage``, what pytracker holds) and the one function that
tracks a batch's frames (``track_batch``).

A stage tracks on one of two threads, and only these two:

- **In the batch** (pytracker linked right after a pyinfer, ``track-in-batch``): pytracker offers its stage at its
  sink pad (``offer``); the pyinfer linked to that pad seats it on its stream of the batch group at start
  (``batching.Member.tracker``). The thread that runs a batch then tracks every seated stream's frame right after
  the batch's detections are written (``track_batch``), all the batch's trackers in one update; the pyinfer's
  streaming thread tracks the frames that were not in a batch (skipped by ``interval``, secondary, NVMM) with
  ``track_seated``. Every buffer leaving that pyinfer has been tracked: pytracker only reports a stored failure.
- **In pytracker's streaming thread** otherwise (no pyinfer right before it, a ``queue`` in between, or
  ``track-in-batch=false``): ``track`` on each buffer, on the shared tracking thread when there is one.

No GStreamer here: buffers are handed to ``meta.gstanalytics`` (read the detections, write the tracks).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from inferstream.batching import Member
    from inferstream.detections import Detections
    from inferstream.meta.gstanalytics import FrameMeta
    from inferstream.shared_worker import SerialWorker
    from inferstream.tracking import TrackColumns, Tracker, TrackResult

DEFAULT_FRAME_NS = 33_333_333  # used only when buffers carry no pts
CLOCK_TIME_NONE = 2**64 - 1  # GST_CLOCK_TIME_NONE

Warn = Callable[[str, Exception, str], None]
"""``warn(kind, error, text)``: report bad input of ``kind`` (the element posts the first of each kind)."""


class _Frame(NamedTuple):
    pts: int
    meta: FrameMeta | None
    dets: Detections | None  # None: the detector skipped the frame


class TrackStage:
    """One stream's tracker and what it writes: reads a buffer's detections (optionally only one producer's),
    updates the tracker, relates a TrackingMtd to each tracked ODMtd, writes predicted boxes (producer
    ``unique_id``) on frames the detector skipped and, with ``output_lost``, for lost tracks.

    ``bypass(True)`` tells the element that a batch group tracks its frames (it then needs no call per buffer:
    pytracker goes passthrough), ``bypass(False)`` that it must see its buffers again: unseated, or a failure of
    the batch's tracking to report (``take_error``)."""

    def __init__(self, tracker: Tracker, *, operate_on: int | None, output_lost: bool, unique_id: int,
                 worker: SerialWorker | None, warn: Warn, bypass: Callable[[bool], None] | None = None) -> None:
        self.tracker, self.worker = tracker, worker
        self._operate_on, self._output_lost, self._unique_id, self._warn = operate_on, output_lost, unique_id, warn
        self._bypass = bypass or (lambda _on: None)
        self._labels: dict[str, int] = {}
        self._last_pts = 0
        self._pending: Exception | None = None  # a failure while seated, reported by the element on its next buffer
        self._seat: Member | None = None  # the batch group's stream whose frames this stage tracks (``seat``)

    @property
    def seated(self) -> bool:
        """A pyinfer's runner tracks this stream's frames (see the module docstring)."""
        return self._seat is not None

    def track_together(self, frames: list[tuple[Any, Any]]) -> None:
        """The batch group's call once a batch is delivered: every seated stage's frame at once (``track_batch``)."""
        track_batch(frames)

    def leave(self) -> None:
        """The batch group's call when this stage's stream leaves it."""
        unseat(self)

    def restart(self) -> None:
        """The stream starts again (a flushing seek): no tracks, no time."""
        self.tracker.reset()
        self._last_pts = 0
        self._pending = None
        self._bypass(self.seated)

    def fail(self, exc: Exception) -> None:
        """Keep a failure of tracking a seated frame for ``take_error``; the element sees its buffers again."""
        self._pending = exc
        self._bypass(False)

    # the two ways in --------------------------------------------------------------------------------------------
    def track(self, buf: Any) -> None:
        """Track ``buf`` here (on the shared tracking thread when there is one); raises what tracking raised."""
        if self.worker is not None:
            self.worker.run(lambda: self._track(buf))
        else:
            self._track(buf)

    def track_seated(self, buf: Any) -> None:
        """Track a frame of the seated stream that was in no batch; a failure is kept for ``take_error``."""
        try:
            self.track(buf)
        except Exception as exc:
            self.fail(exc)

    def take_error(self) -> Exception | None:
        """The failure of the last frame tracked while seated (once), or None."""
        error, self._pending = self._pending, None
        return error

    # the steps --------------------------------------------------------------------------------------------------
    def _track(self, buf: Any) -> None:
        frame = self.observe(buf)
        self.report(buf, frame, self.step(frame))

    def observe(self, buf: Any) -> _Frame:
        """What tracking ``buf`` takes: its pts, its meta, and its detections (None: the detector skipped it)."""
        from inferstream.meta.gstanalytics import read_detections

        pts = self._pts(buf)
        meta = read_detections(buf, unique_id=self._operate_on)
        return _Frame(pts, meta, self._dets(meta) if meta is not None and _detector_looked(meta, self._operate_on)
                      else None)

    def step(self, frame: _Frame) -> TrackResult:
        if frame.dets is None:
            return self.tracker.predict_only(frame.pts)
        return self.tracker.update(frame.dets, frame.pts)

    def report(self, buf: Any, frame: _Frame, result: TrackResult) -> None:
        """Write the frame's tracks onto ``buf``."""
        from inferstream.meta.tracks import write_track_table

        table = self.finish(buf, frame, result)
        write_track_table([buf], [table.shape[1]], table)

    def finish(self, buf: Any, frame: _Frame, result: TrackResult) -> npt.NDArray[np.int64]:
        """``report`` but for the TrackingMtds of the frame's tracked detections, returned as track-table columns
        [5, K] (``write_track_table``: a batch writes all its frames' in one call)."""
        import numpy as np

        if result.malformed:
            self._warn("malformed", ValueError(f"{result.malformed} detections with NaN or infinite values or a "
                                               f"width or height <= 0"), "untrackable detections ignored")
        if frame.dets is None or frame.meta is None:
            self._write_predicted(buf, result)
            return np.zeros((5, 0), dtype=np.int64)
        if self._output_lost:
            self._write_predicted(buf, result)
        return _track_table(frame.meta.od_ids, result.columns, (~result.columns.predicted).nonzero()[0])

    def _pts(self, buf: Any) -> int:
        from inferstream.native.gst import buffer_pts

        pts = buffer_pts(buf)
        if pts == CLOCK_TIME_NONE:
            pts = self._last_pts + DEFAULT_FRAME_NS
        elif pts < self._last_pts:  # the stream jumped back without a flush (a loop, a restart): the tracks'
            self.tracker.reset()  # motion means nothing there
            self._warn("pts", ValueError(f"pts went back from {self._last_pts} to {pts} ns"),
                       "the stream's time went backwards, tracks reset")
        self._last_pts = pts
        return pts

    def _dets(self, meta: FrameMeta) -> Detections:
        """Relabel per-buffer label indices into this stage's stable label table (for per-class matching)."""
        import torch

        from inferstream.detections import Detections

        table = [self._labels.setdefault(name, len(self._labels)) for name in meta.label_names]
        d = meta.dets
        if table == list(range(len(table))):  # the usual case: the buffer's names come in this table's order
            return d
        relabelled = torch.tensor(table, dtype=torch.int64)[d.labels]  # int64, one per row: no checks needed
        return Detections.trusted(d.boxes_xyxy, d.scores, relabelled, d.angles_rad, d.track_ids)

    def _write_predicted(self, buf: Any, result: TrackResult) -> None:
        if len(result.predicted) == 0:
            return

        from inferstream.meta.gstanalytics import label_quarks, producer_quark, write_detections
        from inferstream.meta.tracks import write_track_table

        names = sorted(self._labels, key=self._labels.__getitem__)
        ids = write_detections(buf, result.predicted, label_quarks(names) or label_quarks(["object"]),
                               producer_quark(self._unique_id))
        table = _track_table(ids, result.columns, result.columns.predicted.nonzero()[0])
        write_track_table([buf], [table.shape[1]], table)


def _track_table(od_ids: Sequence[int], columns: TrackColumns, which: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """The TrackingMtds of tracks ``which`` as ``write_track_table``'s columns; ``od_ids``: the ODMtd of each row
    their ``rows`` index (the frame's detections, or the predicted boxes just written)."""
    import numpy as np

    table = np.empty((5, len(which)), dtype=np.int64)  # filled row by row: cheaper than stacking five copies
    table[0] = np.array(od_ids, dtype=np.int64)[columns.rows[which]]
    for row, values in enumerate((columns.track_ids, columns.first_seen_ns, columns.last_seen_ns, columns.lost), 1):
        table[row] = values[which]
    return table


def _detector_looked(meta: FrameMeta, uid: int | None) -> bool:
    """False on frames the detector skipped: no producer record (pooled buffers may keep an empty meta)."""
    if uid is not None:
        return uid in meta.inferred_by
    return bool(meta.inferred_by) or len(meta.dets) > 0


def track_batch(frames: list[tuple[TrackStage, Any]]) -> None:
    """Track one batch's frames (``(stage, buffer)``, one per seated stream), on the batch's thread, in one update
    of all their trackers (``tracking.update_streams``).

    A failure stays its stage's until its element reports it (``take_error``): a later batch does not clear it, as
    with ``in-flight`` it may track the stream's next frame before the failed one reached the element. When the
    batched update raises it has changed no tracker (a ByteTrack, the one algorithm registered), and the frames are
    tracked one by one. A batch of one takes that path at once.
    """
    from inferstream import tracking

    observed = []
    for stage, buf in frames:
        try:
            observed.append((stage, buf, stage.observe(buf)))
        except Exception as exc:
            stage.fail(exc)
    results = None
    if len(observed) > 1:
        try:
            results = tracking.update_streams([s.tracker for s, _, _ in observed], [f.dets for _, _, f in observed],
                                              [f.pts for _, _, f in observed])
        except Exception:  # tracked frame by frame below, where the failing frame's stage keeps it
            results = None
    tables = []
    for i, (stage, buf, frame) in enumerate(observed):
        try:
            table = stage.finish(buf, frame, results[i] if results is not None else stage.step(frame))
            tables.append((stage, buf, table))
        except Exception as exc:
            stage.fail(exc)
    _write_tables(tables)


def _write_tables(tables: list[tuple[TrackStage, Any, npt.NDArray[np.int64]]]) -> None:
    """The batch's TrackingMtds in one call; a buffer that refuses one is its stage's failure, and the buffers
    after it are written in a call again."""
    import numpy as np

    from inferstream.meta.tracks import TrackWriteError, write_track_table

    start = 0
    while start < len(tables):
        part = tables[start:]
        try:
            write_track_table([b for _, b, _ in part], [t.shape[1] for _, _, t in part],
                              np.concatenate([t for _, _, t in part], axis=1))
            return
        except TrackWriteError as exc:
            part[exc.index][0].fail(exc)
            start += exc.index + 1
        except Exception as exc:  # not a buffer's refusal: every stage of the write reports it
            for stage, _, _ in part:
                stage.fail(exc)
            return


_OFFERED: dict[Any, TrackStage] = {}  # sink pad -> the stage of the pytracker it belongs to (track-in-batch)


def offer(pad: Any, stage: TrackStage) -> None:
    """Let the pyinfer linked to ``pad`` (a pytracker's sink pad) track ``stage``'s frames in its batches."""
    _OFFERED[pad] = stage


def withdraw(pad: Any) -> None:
    """Stop offering; the stage tracks its frames itself again."""
    stage = _OFFERED.pop(pad, None)
    if stage is not None:
        unseat(stage)


def seat(stage: TrackStage, member: Member) -> None:
    """Register ``stage`` with ``member`` (a stream of a batch group): the group's batches track its frames."""
    unseat(stage)
    member.tracker, stage._seat = stage, member
    stage._bypass(True)


def unseat(stage: TrackStage) -> None:
    member, stage._seat = stage._seat, None
    if member is not None and member.tracker is stage:
        member.tracker = None
    if member is not None:
        stage._bypass(False)


def offered_at(pad: Any) -> TrackStage | None:
    """The stage offered at ``pad`` (a pyinfer's source pad's peer), if any."""
    return _OFFERED.get(pad) if pad is not None else None
