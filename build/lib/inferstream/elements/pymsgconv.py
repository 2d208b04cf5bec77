"""pymsgconv: turns each frame's GstAnalytics detections into JSON payloads (DeepStream nvmsgconv schemas or our
compact ones) and attaches them to the buffer for a downstream pymsgbroker — nvmsgconv's job on stock GStreamer.

A thin shell (R6): identity, time and meta plumbing here; conversion in ``inferstream.messaging.schema``.

What goes into a :class:`~inferstream.messaging.events.FrameEvent`:

* objects: the frame's ODMtds (only producer ``operate-on-unique-id`` when >= 0) with their TrackingMtd ids;
* stream-id: the ``stream-id`` property, else the sticky ``inferstream/stream-info`` event (pyinfer upstream), else
  the STREAM_START event's id; source-id: the ``source-id`` property, else stream-info's, else 0;
* frame number: buffers seen since the last STREAM_START / FLUSH_STOP (so ``frame-interval`` counts frames that
  reach this element);
* ``ntp_ns`` (wall-clock capture time, ns since the Unix epoch), first found of: a ``GstReferenceTimestampMeta``
  with caps ``timestamp/x-unix`` (Unix epoch) or ``timestamp/x-ntp`` (NTP epoch, 1900, as rtspsrc
  ``add-reference-timestamp-meta=true`` writes it); else the buffer's running time plus the wall clock at running
  time 0, taken once when the element first goes PLAYING (``time.time_ns() - current running time``), or at the
  first buffer when that comes earlier (a prerolled frame), and again on each resume after a pause. On a non-live
  pipeline that runs faster than real time (``sync=false``) these stamps run ahead of the wall clock: they are
  media time anchored at start. Without a PTS (or segment) the converter stamps the conversion time.

Payloads travel as a ``GstCustomMeta`` (see ``inferstream.meta.payload``).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
from gi.repository import GObject, Gst, GstBase

from inferstream.elements import _props as props
from inferstream.elements._caps import any_video_caps, video_templates
from inferstream.elements._errors import post_error
from inferstream.elements._stream import read_stream_info
from inferstream.errors import ConfigError
from inferstream.gstcompat import structure
from inferstream.messaging.schema import SCHEMAS
from inferstream.meta.payload import attach_payloads, register_payload_meta

if TYPE_CHECKING:
    from inferstream.messaging.events import FrameEvent
    from inferstream.messaging.schema import MsgConverter

NTP_TO_UNIX_NS: Final = 2_208_988_800 * 1_000_000_000  # 1900-01-01 -> 1970-01-01


# -- the element ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Settings:
    """Properties read once in do_start (R7)."""

    uid: int | None
    stream_id: str
    source_id: int


class PyMsgConv(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyMsgConv"
    __gstmetadata__ = (
        "inferstream message converter",
        "Filter/Converter/Video",
        ("Converts each frame's GstAnalytics detections (with tracking ids, stream identity, frame number and "
         "wall-clock time) into JSON payloads, DeepStream nvmsgconv full/minimal schema or inferstream's compact "
         "ones, and attaches them as an inferstream-payload custom meta for pymsgbroker; buffers pass unchanged"),
        "inferstream",
    )
    __gsttemplates__ = video_templates(any_video_caps())

    schema = props.choice("Schema", "Payload schema: DeepStream full (one message per object), DeepStream minimal "
                          "(one per frame), or inferstream's compact per-frame / per-object JSON", SCHEMAS,
                          "deepstream-full")
    config = props.string("Config", "nvmsgconv config file (YAML or key-file) with sensorN / placeN / analyticsN "
                          "groups, N = the stream's source-id; empty: descriptions derived from the stream")
    frame_interval = props.integer("Frame interval", "Convert only every N-th frame (nvmsgconv's frame-interval); "
                                   "1 converts every frame", 30, 1, 2**31 - 1)
    skip_empty = props.boolean("Skip empty", "Frames without objects produce no payload (the per-object schemas "
                               "never produce one)", True)
    operate_on_unique_id = props.integer("Operate on unique id", "Convert only detections of this producer "
                                         "(pyinfer/pytracker unique-id); -1 converts all", -1, -1, 2**31 - 1)
    stream_id = props.string("Stream id", "Stream name in the payloads (sensor id fallback) and message key; "
                             "empty: from pyinfer's inferstream/stream-info event, else the stream-start id")
    source_id = props.integer("Source id", "Selects sensorN/placeN/analyticsN of the config; -1: from pyinfer's "
                              "inferstream/stream-info event, else 0", -1, -1, 2**31 - 1)

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)
        self._conv: MsgConverter | None = None
        self._settings = _Settings(None, "", -1)
        self._size = (0, 0)
        self._frame = 0
        self._start_id = ""
        self._identity: tuple[str, int] | None = None  # None: re-read at the next buffer
        self._segment: Gst.Segment | None = None
        self._wall_base_ns: int | None = None
        self._resumed = False
        self._ref_caps: tuple[tuple[Gst.Caps, int], ...] = ()

    # lifecycle ----------------------------------------------------------------------------------------------
    def do_start(self) -> bool:
        from inferstream.messaging.schema import MsgConverter, load_msgconv_config

        try:
            if self.schema not in SCHEMAS:
                raise ConfigError(f"schema={self.schema!r}: expected one of {list(SCHEMAS)}")
            config = load_msgconv_config(self.config) if self.config else None
            self._conv = MsgConverter(self.schema, config, frame_interval=self.frame_interval,
                                      skip_empty=self.skip_empty)
            register_payload_meta()
        except Exception as exc:  # the C boundary (R8)
            post_error(self, exc, "cannot set up the message converter")
            return False
        uid = self.operate_on_unique_id
        self._settings = _Settings(None if uid < 0 else uid, self.stream_id, self.source_id)
        self._ref_caps = ((Gst.Caps.from_string("timestamp/x-unix"), 0),
                          (Gst.Caps.from_string("timestamp/x-ntp"), NTP_TO_UNIX_NS))
        self._frame, self._identity, self._wall_base_ns, self._resumed = 0, None, None, False
        return True

    def do_stop(self) -> bool:
        self._conv = None
        return True

    def do_change_state(self, transition: Gst.StateChange) -> Gst.StateChangeReturn:
        if transition == Gst.StateChange.PLAYING_TO_PAUSED:
            self._resumed = True  # running time will leave out the pause: re-anchor when PLAYING again
        elif transition == Gst.StateChange.PAUSED_TO_PLAYING and (self._wall_base_ns is None or self._resumed):
            running = self.get_current_running_time()  # base time and clock are set by now
            if running != Gst.CLOCK_TIME_NONE:
                self._wall_base_ns, self._resumed = time.time_ns() - running, False
        return GstBase.BaseTransform.do_change_state(self, transition)

    def do_set_caps(self, incaps: Gst.Caps, outcaps: Gst.Caps) -> bool:
        s = structure(incaps.get_structure(0))
        (ok_w, width), (ok_h, height) = s.get_int("width"), s.get_int("height")
        self._size = (width, height) if ok_w and ok_h else (0, 0)
        return True

    def do_sink_event(self, event: Gst.Event) -> bool:
        if event.type == Gst.EventType.STREAM_START:
            self._start_id = event.parse_stream_start() or ""
            self._frame, self._identity = 0, None
        elif event.type == Gst.EventType.CUSTOM_DOWNSTREAM_STICKY:
            self._identity = None  # maybe a new stream-info; read from the pad at the next buffer
        elif event.type == Gst.EventType.FLUSH_STOP:
            self._frame = 0
        elif event.type == Gst.EventType.SEGMENT:
            self._segment = event.parse_segment()
        return GstBase.BaseTransform.do_sink_event(self, event)

    # streaming ----------------------------------------------------------------------------------------------
    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        frame, self._frame = self._frame, self._frame + 1
        if self._conv is None:
            return Gst.FlowReturn.OK
        try:
            payloads = []
            if frame % self._conv.frame_interval == 0:
                payloads = self._conv.convert(self._event(buf, frame))
            payloads += self._vlm_payloads(buf)  # answers are rare and each one counts: any frame that carries one
            if payloads:
                attach_payloads(buf, payloads, schema=self._conv.schema, stream_id=self._stream_identity()[0],
                                frame=frame)
        except Exception as exc:  # the one broad catch: the C boundary (R8)
            post_error(self, exc, "message conversion failed")
            return Gst.FlowReturn.ERROR
        return Gst.FlowReturn.OK

    def _vlm_payloads(self, buf: Gst.Buffer) -> list[bytes]:
        """One ``inferstream.vlm-answer/1`` payload per pyvlm answer on the buffer."""
        from inferstream.messaging.schema import rfc3339_ms
        from inferstream.messaging.vlm import vlm_answer_document
        from inferstream.meta.vlm import read_answers

        answers = read_answers(buf)
        if not answers:
            return []
        ts = rfc3339_ms(self._wall_clock_ns(buf) or time.time_ns())
        source_id = self._stream_identity()[1]
        return [json.dumps(vlm_answer_document(a, source_id=source_id, timestamp=ts), separators=(",", ":"),
                           ensure_ascii=False).encode() for a in answers]

    def _event(self, buf: Gst.Buffer, frame: int) -> FrameEvent:
        from inferstream.messaging.events import FrameEvent
        from inferstream.meta.classifications import read_classifications
        from inferstream.meta.gstanalytics import read_detections

        stream_id, source_id = self._stream_identity()
        meta = read_detections(buf, unique_id=self._settings.uid)
        pts = buf.pts if buf.pts != Gst.CLOCK_TIME_NONE else 0
        width, height = self._size
        ntp = self._wall_clock_ns(buf)
        if meta is None:
            return FrameEvent(stream_id, source_id, frame, pts, ntp, width, height)
        attributes = [[(c.kind or f"classifier{c.producer}", c.label, min(max(c.confidence, 0.0), 1.0)) for c in row]
                      for row in read_classifications(buf, meta.od_ids)]
        return FrameEvent.from_detections(meta.dets, meta.label_names, stream_id=stream_id, source_id=source_id,
                                          frame_number=frame, pts_ns=pts, ntp_ns=ntp, width=width, height=height,
                                          attributes=attributes)

    def _stream_identity(self) -> tuple[str, int]:
        if self._identity is None:
            info = read_stream_info(self.sinkpad)
            s = self._settings
            stream_id = s.stream_id or (info[0] if info else "") or self._start_id or self.get_name()
            source_id = s.source_id if s.source_id >= 0 else (info[1] if info else 0)
            self._identity = (stream_id, source_id)
        return self._identity

    def _wall_clock_ns(self, buf: Gst.Buffer) -> int | None:
        """Capture time in ns since the Unix epoch (see the module docstring), None when unknown."""
        for caps, offset in self._ref_caps:
            ref = buf.get_reference_timestamp_meta(caps)
            if ref is not None:
                return int(ref.timestamp) - offset
        if buf.pts == Gst.CLOCK_TIME_NONE or self._segment is None:
            return None
        running = self._segment.to_running_time(Gst.Format.TIME, buf.pts)
        if running == Gst.CLOCK_TIME_NONE:
            return None
        if self._wall_base_ns is None:  # before the first PLAYING (preroll): this frame is "now"
            self._wall_base_ns = time.time_ns() - running
        return self._wall_base_ns + running


GObject.type_register(PyMsgConv)
