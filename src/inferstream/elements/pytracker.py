"""pytracker: multi-object tracking on GstAnalytics detections — nvtracker's job on stock GStreamer.

Reads the frame's ODMtds (optionally only one producer's), tracks them per stream (one element = one stream), and
relates a TrackingMtd (id, first/last seen, lost flag) RELATE_TO each tracked ODMtd; no box is duplicated. On frames
without analytics meta (those ``pyinfer interval=N`` skipped) the tracks are carried forward by their motion model
and written as ODMtds whose producer is this element's ``unique-id`` — that is how "predicted" boxes are marked.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
from gi.repository import GObject, Gst, GstBase

from inferstream.elements import _props as props
from inferstream.elements._caps import any_video_caps, video_templates
from inferstream.elements._errors import post_error, post_warning
from inferstream.native.gst import buffer_pts

if TYPE_CHECKING:
    from inferstream.detections import Detections
    from inferstream.elements.pyinfer import PyInfer
    from inferstream.meta.gstanalytics import FrameMeta
    from inferstream.shared_worker import SerialWorker
    from inferstream.tracking import Tracker, TrackResult

_DEFAULT_FRAME_NS = 33_333_333  # used only when buffers carry no pts
_CLOCK_TIME_NONE = Gst.CLOCK_TIME_NONE  # read once: each Gst.X goes through the overrides' module proxy


class PyTracker(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyTracker"
    __gstmetadata__ = (
        "inferstream tracker",
        "Filter/Analyzer/Video",
        "Tracks GstAnalytics object detections (ByteTrack: two-stage association with low-score detections and "
        "Kalman motion) and relates a TrackingMtd to each tracked detection; carries tracks across frames the "
        "detector skipped",
        "inferstream",
    )
    __gsttemplates__ = video_templates(any_video_caps())

    algorithm = props.string("Algorithm", "Tracker algorithm (bytetrack)", "bytetrack")
    high_threshold = props.number("High threshold", "Detections scoring at least this are matched first and may "
                                  "start tracks", 0.5, 0.0, 1.0)
    low_threshold = props.number("Low threshold", "Detections below this are ignored; those between low and high "
                                 "only extend existing tracks (ByteTrack's second stage)", 0.1, 0.0, 1.0)
    new_track_threshold = props.number("New track threshold", "An unmatched detection must score this to start a "
                                       "track", 0.6, 0.0, 1.0)
    match_iou = props.number("Match IoU", "Minimum IoU between a track's predicted box and a detection", 0.2,
                             0.0, 1.0)
    max_age = props.number("Max age", "Seconds (of stream time) a track survives without a detection", 2.0,
                           0.0, 3600.0)
    coast_time = props.number("Coast time", "Seconds a lost track keeps being reported from its motion model "
                              "(with output-lost-tracks)", 0.2, 0.0, 3600.0)
    output_lost_tracks = props.boolean("Output lost tracks", "On frames with detections, also write the predicted "
                                       "boxes of tracks lost for less than coast-time (lost flag set, producer = "
                                       "unique-id), as nvtracker's shadow tracking does", False)
    min_hits = props.integer("Min hits", "Consecutive detections before a track is confirmed and gets an id",
                             2, 1, 100)
    per_class = props.boolean("Per class", "Only associate detections and tracks of the same label", False)
    first_id = props.integer("First id", "First track id this element hands out (give streams disjoint ranges "
                             "for pipeline-unique ids)", 1, 0, 2**31 - 1)
    operate_on_unique_id = props.integer("Operate on unique id", "Track only detections of this producer "
                                         "(pyinfer unique-id); -1 tracks all", -1, -1, 2**31 - 1)
    shared_thread = props.boolean("Shared thread", "While several pytrackers run in the process, track on one "
                                  "thread shared by all of them, one frame after another: with many streams this "
                                  "avoids the GIL hand-offs between streaming threads that otherwise cost more than "
                                  "the tracking", True)
    track_in_batch = props.boolean("Track in batch", "When linked right after a pyinfer, track each frame on the "
                                   "thread that runs pyinfer's batch, right after its detections are written: no "
                                   "thread hop, and no second thread competing for the GIL while the next batch "
                                   "waits on the model", True)
    unique_id = props.integer("Unique id", "Producer id recorded on the boxes this element predicts for frames "
                              "without detections", 1000, 0, 2**31 - 1)

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)
        self._tracker: Tracker | None = None
        self._labels: dict[str, int] = {}
        self._last_pts = 0
        self._operate_on: int | None = None
        self._output_lost = False
        self._worker: SerialWorker | None = None
        self._upstream: PyInfer | None = None  # tracks for us on its batch thread (track-in-batch)
        self._batch_mark: int | None = None  # pts of the frame tracked on the batch thread, still to pass here
        self._batch_error: Exception | None = None
        self._warned: set[str] = set()  # the kinds of bad input already reported (once each, per start)

    def do_start(self) -> bool:
        from inferstream.shared_worker import shared_worker
        from inferstream.tracking import make_tracker

        try:
            self._tracker = make_tracker(
                self.algorithm, high_score=self.high_threshold, low_score=self.low_threshold,
                new_track_score=self.new_track_threshold, match_iou=self.match_iou, max_lost_s=self.max_age,
                coast_s=self.coast_time, min_hits=self.min_hits, per_class=self.per_class, first_id=self.first_id)
        except Exception as exc:
            post_error(self, exc, "cannot create the tracker")
            return False
        self._last_pts = 0
        self._warned = set()
        # read once: properties are READY-only, and a GObject property read per frame is not free
        self._operate_on = None if self.operate_on_unique_id < 0 else self.operate_on_unique_id
        self._output_lost = self.output_lost_tracks
        self._worker = shared_worker("inferstream-tracking") if self.shared_thread else None
        if self._worker is not None:
            self._worker.acquire()
        self._batch_mark, self._batch_error = None, None
        self._upstream = self._linked_pyinfer() if self.track_in_batch else None
        if self._upstream is not None:
            self._upstream.set_follower(_track_batch, self)
        return True

    def _linked_pyinfer(self) -> PyInfer | None:
        """The pyinfer whose source pad is linked to our sink pad, if any: it then runs our frames' tracking (an
        element in between, a queue say, keeps tracking here)."""
        from inferstream.elements.pyinfer import PyInfer

        peer = self.sinkpad.get_peer()
        element = peer.get_parent_element() if peer is not None else None
        return element if isinstance(element, PyInfer) else None

    def do_stop(self) -> bool:
        if self._upstream is not None:
            self._upstream.set_follower(None)
            self._upstream = None
        if self._worker is not None:
            self._worker.release()
            self._worker = None
        return True

    def do_sink_event(self, event: Gst.Event) -> bool:
        if event.type == Gst.EventType.FLUSH_STOP and self._tracker is not None:
            self._tracker.reset()
            self._last_pts = 0  # the stream's time starts again (a seek): not time going back
            self._batch_mark, self._batch_error = None, None
        return GstBase.BaseTransform.do_sink_event(self, event)

    def _pts(self, buf: Gst.Buffer) -> int:
        pts = buffer_pts(buf)
        if pts == _CLOCK_TIME_NONE:
            pts = self._last_pts + _DEFAULT_FRAME_NS
        elif pts < self._last_pts and self._tracker is not None:  # the stream jumped back without a flush (a loop,
            self._tracker.reset()  # a restart): the tracks' motion means nothing there
            self._warn_once("pts", ValueError(f"pts went back from {self._last_pts} to {pts} ns"),
                            "the stream's time went backwards, tracks reset")
        self._last_pts = pts
        return pts

    def _warn_once(self, kind: str, exc: Exception, text: str) -> None:
        """A bus warning the first time this kind of bad input shows up: it may recur on every frame."""
        if kind not in self._warned:
            self._warned.add(kind)
            post_warning(self, exc, text)

    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        if self._batch_mark is not None and buffer_pts(buf) == self._batch_mark:
            self._batch_mark, error, self._batch_error = None, self._batch_error, None
            if error is None:
                return Gst.FlowReturn.OK
            post_error(self, error, "tracking failed")
            return Gst.FlowReturn.ERROR
        try:
            if self._worker is not None:
                self._worker.run(lambda: self._track(buf))
            else:
                self._track(buf)
        except Exception as exc:  # the C boundary (R8)
            post_error(self, exc, "tracking failed")
            return Gst.FlowReturn.ERROR
        return Gst.FlowReturn.OK

    def _track(self, buf: Gst.Buffer) -> None:
        frame = self._observe(buf)
        self._report(buf, frame, self._step(frame))

    def _observe(self, buf: Gst.Buffer) -> _Frame:
        """What tracking ``buf`` takes: its pts, its meta, and its detections (None: the detector skipped it)."""
        from inferstream.meta.gstanalytics import read_detections

        pts = self._pts(buf)
        meta = read_detections(buf, unique_id=self._operate_on)
        return _Frame(pts, meta, self._dets(meta) if self._detector_looked(meta, self._operate_on) else None)

    def _step(self, frame: _Frame) -> TrackResult:
        if frame.dets is None:
            return self._tracker.predict_only(frame.pts)
        return self._tracker.update(frame.dets, frame.pts)

    def _report(self, buf: Gst.Buffer, frame: _Frame, result: TrackResult) -> None:
        """Write the frame's tracks onto ``buf``."""
        if result.malformed:
            self._warn_once("malformed", ValueError(f"{result.malformed} detections with NaN or infinite values or "
                                                    f"a width or height <= 0"), "untrackable detections ignored")
        if frame.dets is None:
            self._write_predicted(buf, result)
        else:
            self._write_tracked(buf, frame.meta.od_ids, result)
            if self._output_lost:
                self._write_predicted(buf, result)

    @staticmethod
    def _detector_looked(meta: FrameMeta | None, uid: int | None) -> bool:
        """False on frames the detector skipped: no producer record (pooled buffers may keep an empty meta)."""
        if meta is None:
            return False
        if uid is not None:
            return uid in meta.inferred_by
        return bool(meta.inferred_by) or len(meta.dets) > 0

    def _dets(self, meta: FrameMeta) -> Detections:
        """Relabel per-buffer label indices into this element's stable label table (for per-class matching)."""
        import torch

        from inferstream.detections import Detections

        table = [self._labels.setdefault(name, len(self._labels)) for name in meta.label_names]
        d = meta.dets
        if table == list(range(len(table))):  # the usual case: the buffer's names come in this table's order
            return d
        relabelled = torch.tensor(table, dtype=torch.int64)[d.labels]  # int64, one per row: no checks needed
        return Detections.trusted(d.boxes_xyxy, d.scores, relabelled, d.angles_rad, d.track_ids)

    def _write_tracked(self, buf: Gst.Buffer, od_ids: tuple[int, ...], result: TrackResult) -> None:
        from inferstream.meta.gstanalytics import TrackRecord, write_tracks

        records = [TrackRecord(od_ids[t.row], t.track_id, t.first_seen_ns, t.last_seen_ns, False)
                   for t in result.tracks if not t.predicted]
        write_tracks(buf, records)

    def _write_predicted(self, buf: Gst.Buffer, result: TrackResult) -> None:
        if len(result.predicted) == 0:
            return
        from inferstream.meta.gstanalytics import (
            TrackRecord,
            label_quarks,
            producer_quark,
            write_detections,
            write_tracks,
        )

        names = sorted(self._labels, key=self._labels.get)
        ids = write_detections(buf, result.predicted, label_quarks(names) or label_quarks(["object"]),
                               producer_quark(self.unique_id))
        records = [TrackRecord(ids[t.row], t.track_id, t.first_seen_ns, t.last_seen_ns, t.lost)
                   for t in result.tracks if t.predicted]
        write_tracks(buf, records)


class _Frame(NamedTuple):
    pts: int
    meta: FrameMeta | None
    dets: Detections | None  # None: the detector skipped the frame


def _track_batch(frames: list[tuple[PyTracker, Gst.Buffer]]) -> None:
    """pyinfer's follow-up (track-in-batch): one batch's frames, one per pytracker, tracked on the batch's thread in
    one update of all their trackers (``update_streams``); each frame's pass through its pytracker then only reports.

    A tracking failure stays the failing pytracker's error (posted when its frame passes): when the batched update
    raises it has changed no tracker (a ByteTrack, the one algorithm registered), and the frames are tracked one by
    one. A batch of one takes that path at once.
    """
    from inferstream.tracking import update_streams

    observed = []
    for el, buf in frames:
        el._batch_mark, el._batch_error = buffer_pts(buf), None
        try:
            observed.append((el, buf, el._observe(buf)))
        except Exception as exc:  # reported by do_transform_ip, from this element
            el._batch_error = exc
    results = None
    if len(observed) > 1:
        try:
            results = update_streams([el._tracker for el, _, _ in observed], [f.dets for _, _, f in observed],
                                     [f.pts for _, _, f in observed])
        except Exception:  # tracked frame by frame below, where the failing frame's element reports it
            results = None
    for i, (el, buf, frame) in enumerate(observed):
        try:
            el._report(buf, frame, results[i] if results is not None else el._step(frame))
        except Exception as exc:
            el._batch_error = exc


GObject.type_register(PyTracker)
