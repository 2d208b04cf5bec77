"""pytracker: multi-object tracking on GstAnalytics detections — nvtracker's job on stock GStreamer.

Reads the frame's ODMtds (optionally only one producer's), tracks them per stream (one element = one stream), and
relates a TrackingMtd (id, first/last seen, lost flag) RELATE_TO each tracked ODMtd; no box is duplicated. On frames
without analytics meta (those ``pyinfer interval=N`` skipped) the tracks are carried forward by their motion model
and written as ODMtds whose producer is this element's ``unique-id`` — that is how "predicted" boxes are marked.

A shell (R6): the tracker and what it writes live in ``runner.tracking.TrackStage``, and where it runs (in the
batch of the pyinfer linked right before this element, or here) is decided there, in one place.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
from gi.repository import GObject, Gst, GstBase

from inferstream.elements import _props as props
from inferstream.elements._caps import any_video_caps, video_templates
from inferstream.elements._errors import post_error, post_warning
from inferstream.native.gst import skip_transform_ip_in_passthrough

if TYPE_CHECKING:
    from inferstream.runner.tracking import TrackStage


class PyTracker(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyTracker"
    __gstmetadata__ = (
        "inferstream tracker",
        "Filter/Analyzer/Video",
        ("Tracks GstAnalytics object detections (ByteTrack: two-stage association with low-score detections and "
         "Kalman motion) and relates a TrackingMtd to each tracked detection; carries tracks across frames the "
         "detector skipped"),
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
        self._stage: TrackStage | None = None  # the tracker and what it writes (runner.tracking), from do_start
        self._warned: set[str] = set()  # the kinds of bad input already reported (once each, per start)

    def do_start(self) -> bool:
        from inferstream.runner.tracking import TrackStage, offer
        from inferstream.shared_worker import shared_worker
        from inferstream.tracking import make_tracker

        try:
            tracker = make_tracker(
                self.algorithm, high_score=self.high_threshold, low_score=self.low_threshold,
                new_track_score=self.new_track_threshold, match_iou=self.match_iou, max_lost_s=self.max_age,
                coast_s=self.coast_time, min_hits=self.min_hits, per_class=self.per_class, first_id=self.first_id)
        except Exception as exc:
            post_error(self, exc, "cannot create the tracker")
            return False
        self._warned = set()
        worker = shared_worker("inferstream-tracking") if self.shared_thread else None
        if worker is not None:
            worker.acquire()
        # properties read once: they are READY-only, and a GObject property read per frame is not free
        self._stage = TrackStage(tracker, operate_on=None if self.operate_on_unique_id < 0 else
                                 self.operate_on_unique_id, output_lost=self.output_lost_tracks,
                                 unique_id=self.unique_id, worker=worker, warn=self._warn_once,
                                 bypass=self._bypass)
        if self.track_in_batch:  # the pyinfer linked to our sink pad tracks for us in its batches (runner.tracking)
            offer(self.sinkpad, self._stage)
        return True

    def do_stop(self) -> bool:
        from inferstream.runner.tracking import withdraw

        withdraw(self.sinkpad)
        self.set_passthrough(False)
        if self._stage is not None and self._stage.worker is not None:
            self._stage.worker.release()
            self._stage.worker = None
        return True

    def do_sink_event(self, event: Gst.Event) -> bool:
        if event.type == Gst.EventType.FLUSH_STOP and self._stage is not None:
            self._stage.restart()  # the stream's time starts again (a seek): not time going back
        return GstBase.BaseTransform.do_sink_event(self, event)

    def _bypass(self, on: bool) -> None:
        """Passthrough while a pyinfer's batches track this element's frames: the base class then pushes each
        buffer without calling ``do_transform_ip`` (``transform_ip_on_passthrough`` is cleared below), one PyGObject
        call per buffer fewer. Off again to report a failure of that tracking, or once it stops."""
        self.set_passthrough(on and _SKIPS_IN_PASSTHROUGH)

    def _warn_once(self, kind: str, exc: Exception, text: str) -> None:
        """A bus warning the first time this kind of bad input shows up: it may recur on every frame."""
        if kind not in self._warned:
            self._warned.add(kind)
            post_warning(self, exc, text)

    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        stage = self._stage
        try:
            if stage is None:
                raise RuntimeError("not started")
            if stage.seated:  # tracked upstream already (runner.tracking): report how that went
                error = stage.take_error()
                if error is not None:
                    raise error
            else:
                stage.track(buf)
        except Exception as exc:  # the C boundary (R8)
            post_error(self, exc, "tracking failed")
            return Gst.FlowReturn.ERROR
        return Gst.FlowReturn.OK


GObject.type_register(PyTracker)
_SKIPS_IN_PASSTHROUGH = skip_transform_ip_in_passthrough(PyTracker.__gtype_name__)
