"""pyvlm: asks a vision-language model about whole frames, short clips or the objects an upstream detector wrote,
and attaches the answers as ``inferstream-vlm-answer`` metadata (``inferstream.meta.vlm``) plus one bus message per
answer. A thin shell (R6): scheduling and requests live in ``inferstream.vlm.runner``, backends in
``inferstream.vlm.backends``, the worker and its bounded queue in ``inferstream.vlm.service``.

By default the video never waits: requests go to a worker through a bounded queue (a full queue drops the request
and counts it), and each answer rides on the first buffer of its stream after it arrives, carrying the pts of the
frame it describes. ``sync=true`` (offline files) answers before the frame moves on and attaches to the frame itself.
"""
from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Final

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import GObject, Gst, GstBase, GstVideo

from inferstream.elements import _props as props
from inferstream.elements._caps import system_video_caps, video_templates
from inferstream.elements._errors import post_error, post_warning
from inferstream.elements._stream import read_stream_info
from inferstream.errors import ConfigError, UnsupportedModelError
from inferstream.rawframe import PACKED_FORMATS

if TYPE_CHECKING:
    from inferstream.frames.system import FrameFormat
    from inferstream.vlm.runner import FrameObject, StreamRunner, VlmSettings
    from inferstream.vlm.types import VlmAnswer

ANSWER_MESSAGE: Final = "inferstream-vlm-answer"
_NS: Final = 1_000_000_000


class PyVlm(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyVlm"
    __gstmetadata__ = (
        "inferstream vision-language model",
        "Filter/Analyzer/Video",
        ("Sends whole frames, short clips or upstream detections' crops to a vision-language model (transformers "
         "in-process or any OpenAI-compatible server) and attaches the answers as inferstream-vlm-answer metadata "
         "and bus messages, without stalling the video"),
        "inferstream",
    )
    __gsttemplates__ = video_templates(system_video_caps(PACKED_FORMATS))

    backend = props.choice("Backend", "transformers: a local model folder in-process; openai: an OpenAI-compatible "
                           "server at server-url", ("transformers", "openai"), "transformers")
    model = props.string("Model", "transformers: a folder that AutoModelForImageTextToText + AutoProcessor load; "
                         "openai: the model name the server serves")
    server_url = props.string("Server URL", "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (API key, if "
                              "any, from INFERSTREAM_VLM_API_KEY)")
    device = props.string("Device", "transformers: torch device (cpu, cuda, cuda:1)", "cpu")
    dtype = props.choice("Dtype", "transformers: weights dtype", ("auto", "float32", "float16", "bfloat16"), "auto")
    batch_size = props.integer("Batch size", "transformers: requests answered in one generate call (several "
                               "streams' pyvlms with the same settings share one model and batch together)", 4, 1, 256)
    max_new_tokens = props.integer("Max new tokens", "Longest answer, in tokens (greedy decoding)", 32, 1, 4096)
    mode = props.choice("Mode", "frame: the whole frame; clip: clip-length frames per request; objects: the crops "
                        "of upstream detections", ("frame", "clip", "objects"), "frame")
    interval = props.integer("Interval", "Ask every N frames (objects mode: untracked objects, and tracked ones "
                             "without a per-track policy)", 30, 1, 2**31 - 1)
    interval_s = props.number("Interval seconds", "Ask every this many seconds of stream time instead (0: use "
                              "interval)", 0.0, 0.0, 86400.0)
    clip_length = props.integer("Clip length", "clip mode: frames per request", 4, 1, 256)
    clip_stride = props.integer("Clip stride", "clip mode: frames between the clip's frames", 1, 1, 10000)
    operate_on_unique_id = props.integer("Operate on unique id", "objects mode: only detections of this producer "
                                         "(pyinfer unique-id); -1: all", -1, -1, 2**31 - 1)
    classes = props.string("Classes", "objects mode: comma-separated labels to ask about (empty: all)")
    new_tracks_only = props.boolean("New tracks only", "objects mode: ask once per track, when it first appears", False)
    track_interval_s = props.number("Track interval seconds", "objects mode: ask again about a track after this "
                                    "many seconds (0: frame schedule)", 0.0, 0.0, 86400.0)
    prompt = props.string("Prompt", "The question; {stream_id}, {label}, {track_id} are filled in (may change "
                          "while PLAYING)", "Describe the image.", mutable_playing=True)
    stream_prompts = props.string("Stream prompts", "JSON object stream-id -> prompt overriding prompt per stream")
    json_schema = props.string("JSON schema", "Ask for JSON matching this schema (JSON text or a file path); "
                               "answers that do not parse or match count as failed-json")
    sync = props.boolean("Sync", "Answer before the frame moves on and attach to that frame (offline files); "
                         "default: never wait", False)
    queue_size = props.integer("Queue size", "Requests waiting for the model; more are dropped (counted)", 8, 1, 10000)
    timeout = props.number("Timeout", "openai: seconds per HTTP attempt", 30.0, 0.1, 3600.0)
    retries = props.integer("Retries", "openai: extra attempts on connection errors, timeouts, 5xx", 2, 0, 100)
    concurrency = props.integer("Concurrency", "openai: requests in flight at once", 4, 1, 256)
    image_format = props.choice("Image format", "openai: data-URL encoding", ("jpeg", "png"), "jpeg")
    max_image_pixels = props.integer("Max image pixels", "Images larger than this (w*h) are not sent (failed-image)",
                                     4096 * 4096, 1, 2**31 - 1)
    drain_timeout = props.number("Drain timeout", "At EOS, seconds to wait for pending answers (their bus "
                                 "messages are posted; they ride on no buffer)", 5.0, 0.0, 3600.0)
    stream_id = props.string("Stream id", "Stream name in answers; empty: pyinfer's stream-info, else stream-start")

    @GObject.Property(type=str, nick="Statistics", flags=GObject.ParamFlags.READABLE,
                      blurb="Counters as JSON: requested, answered, dropped (queue full), failed and failed-<kind> "
                      "(server, timeout, garbage, prompt, image, json, model), pending, attached, unattached")
    def stats(self) -> str:
        client = self._runner.client.stats.as_dict() if self._runner is not None else self._last_stats
        return json.dumps({**client, "attached": self._attached, "unattached": self._unattached,
                           **({"disabled": self._disabled} if self._disabled else {})})

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)
        self._runner: StreamRunner | None = None
        self._format: FrameFormat | None = None
        self._uid: int | None = None
        self._frame = 0
        self._start_id = ""
        self._identity: str | None = None
        self._attached = self._unattached = 0
        self._last_stats: dict[str, int] = {}
        self._disabled = ""
        self._warned: set[str] = set()
        self._warn_lock = threading.Lock()

    # lifecycle ----------------------------------------------------------------------------------------------
    def do_start(self) -> bool:
        from inferstream.meta.vlm import register_answer_meta
        from inferstream.vlm.runner import StreamRunner
        from inferstream.vlm.service import connect

        self._attached = self._unattached = self._frame = 0
        self._disabled, self._warned, self._identity = "", set(), None
        try:
            settings = self._settings()
            register_answer_meta()
            client = connect(self._backend_config(), self.batch_size, self.queue_size, self._on_answer)
        except UnsupportedModelError as exc:  # not a VLM: say why, let the video go on without answers
            self._disabled = str(exc)
            post_warning(self, exc, "pyvlm disabled, the video passes unanswered")
            return True
        except Exception as exc:
            post_error(self, exc, f"cannot start pyvlm with model {self.model!r}")
            return False
        self._runner = StreamRunner(settings, client)
        uid = self.operate_on_unique_id
        self._uid = None if uid < 0 else uid
        return True

    def do_stop(self) -> bool:
        if self._runner is not None:
            self._last_stats = self._runner.client.stats.as_dict()
            self._runner.client.close()
            self._runner = None
        return True

    def _backend_config(self) -> Any:
        from inferstream.vlm.backends import BackendConfig

        return BackendConfig(self.backend, self.model, self.device, self.dtype, self.max_new_tokens, self.server_url,
                             self.timeout, self.retries, self.concurrency, self.image_format, self.max_image_pixels)

    def _settings(self) -> VlmSettings:
        from pathlib import Path

        from inferstream.vlm.runner import VlmSettings
        from inferstream.vlm.select import MODES

        if not self.model:
            raise ConfigError("model is not set (a model folder, or the server's model name)")
        if self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r}: expected one of {list(MODES)}")
        try:
            prompts = json.loads(self.stream_prompts) if self.stream_prompts else {}
            text = self.json_schema
            schema = json.loads(Path(text).read_text() if text and Path(text).is_file() else text) if text else None
        except (ValueError, OSError) as exc:
            raise ConfigError(f"stream-prompts / json-schema: {exc}") from exc
        if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
            raise ConfigError('stream-prompts: expected a JSON object {"stream-id": "prompt", ...}')
        return VlmSettings(self.mode, self.interval, round(self.interval_s * _NS), self.clip_length,
                           self.clip_stride, frozenset(c.strip() for c in self.classes.split(",") if c.strip()),
                           self.new_tracks_only, round(self.track_interval_s * _NS), prompts, schema, self.sync)

    def do_set_caps(self, incaps: Gst.Caps, outcaps: Gst.Caps) -> bool:
        from inferstream.frames.system import frame_format

        info = GstVideo.VideoInfo.new_from_caps(incaps)
        self._format = None if info is None else frame_format(info)
        return self._format is not None

    def do_sink_event(self, event: Gst.Event) -> bool:
        if event.type in (Gst.EventType.STREAM_START, Gst.EventType.FLUSH_STOP):
            if event.type == Gst.EventType.STREAM_START:
                self._start_id, self._identity = event.parse_stream_start() or "", None
            self._frame = 0
            if self._runner is not None:
                self._runner.reset()
        elif event.type == Gst.EventType.CUSTOM_DOWNSTREAM_STICKY:
            self._identity = None
        elif event.type == Gst.EventType.EOS and self._runner is not None:
            self._drain()
        return GstBase.BaseTransform.do_sink_event(self, event)

    def _drain(self) -> None:
        """At EOS: wait (bounded) for pending answers; those that can ride on no buffer are counted."""
        client = self._runner.client  # type: ignore[union-attr]
        if not self.sync:
            client.wait_idle(self.drain_timeout)
        self._unattached += len(client.take())
        stats = client.stats
        if stats.dropped or stats.failed:
            post_warning(self, RuntimeError(json.loads(self.stats)), "pyvlm: some requests were not answered")

    # streaming ----------------------------------------------------------------------------------------------
    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        frame, self._frame = self._frame, self._frame + 1
        runner = self._runner
        if runner is None:
            return Gst.FlowReturn.OK
        try:
            pts = buf.pts if buf.pts != Gst.CLOCK_TIME_NONE else -1
            answers = self._ask(runner, buf, frame, pts) if runner.frame_due(frame, pts) else []
            if runner.client.stats.dropped and "dropped" not in self._warned:
                self._warned.add("dropped")
                post_warning(self, RuntimeError(f"queue-size={self.queue_size} requests are waiting"),
                             "pyvlm dropped a request: the model is slower than the requests come (further drops "
                             "are counted in stats)")
            answers += runner.client.take()
            if answers:
                self._attach(buf, [a for a in answers if a.ok], frame)
        except Exception as exc:
            post_error(self, exc, "pyvlm failed")
            return Gst.FlowReturn.ERROR
        return Gst.FlowReturn.OK

    def _ask(self, runner: StreamRunner, buf: Gst.Buffer, frame: int, pts: int) -> list[VlmAnswer]:
        from inferstream.frames.system import mapped_frame

        objects = self._objects(buf) if runner.settings.mode == "objects" else []
        if runner.settings.mode == "objects" and not objects:
            return []
        fmt = self._format
        if fmt is None:
            raise RuntimeError("no caps before the first buffer")
        with mapped_frame(buf, fmt) as raw:
            return runner.on_frame(stream_id=self._stream_identity(), frame=frame, pts_ns=pts,
                                   pixels=raw.planes[0].numpy(), fmt=fmt.name, objects=objects, prompt=self.prompt)

    def _objects(self, buf: Gst.Buffer) -> list[FrameObject]:
        from inferstream.meta.gstanalytics import read_detections
        from inferstream.vlm.runner import FrameObject

        meta = read_detections(buf, unique_id=self._uid)
        if meta is None or len(meta.dets) == 0:
            return []
        dets = meta.dets
        tracks = dets.track_ids.tolist() if dets.track_ids is not None else [-1] * len(dets)
        boxes = dets.boxes_xyxy.round().int().tolist()
        return [FrameObject(od, t, meta.label_names[lab], tuple(box))
                for od, t, lab, box in zip(meta.od_ids, tracks, dets.labels.tolist(), boxes)]

    def _attach(self, buf: Gst.Buffer, answers: list[VlmAnswer], frame: int) -> None:
        """Answers onto ``buf``; an object's answer relates to this buffer's ODMtd of the same object."""
        from inferstream.meta.vlm import attach_answer

        od_by_track: dict[int, int] | None = None
        for answer in answers:
            obj, od_id = answer.request.obj, -1
            if obj is not None and answer.request.frame == frame:
                od_id = obj.od_id  # the described frame itself (sync mode)
            elif obj is not None and obj.track_id >= 0:
                if od_by_track is None:
                    od_by_track = {o.track_id: o.od_id for o in self._objects(buf) if o.track_id >= 0}
                od_id = od_by_track.get(obj.track_id, -1)
            attach_answer(buf, answer, od_id)
            self._attached += 1

    def _stream_identity(self) -> str:
        if self._identity is None:
            info = read_stream_info(self.sinkpad)
            self._identity = self.stream_id or (info[0] if info else "") or self._start_id or self.get_name()
        return self._identity

    # answers (any thread) -------------------------------------------------------------------------------------
    def _on_answer(self, answer: VlmAnswer) -> None:
        """One bus message per answer; a warning for the first failure of each kind (all are counted)."""
        if answer.error is not None:
            with self._warn_lock:
                first = answer.error.kind not in self._warned
                self._warned.add(answer.error.kind)
            if first:
                post_warning(self, answer.error, f"pyvlm request failed ({answer.error.kind}; further ones are "
                                                 "counted in stats)")
            return
        req = answer.request
        s = Gst.Structure.new_empty(ANSWER_MESSAGE)
        for key, value in (("text", answer.text), ("stream-id", req.stream_id),
                           ("label", req.obj.label if req.obj else "")):
            s.set_value(key, value)
        for key, gtype, number in (("frame", GObject.TYPE_UINT64, req.frame), ("pts", GObject.TYPE_UINT64,
                                   max(req.pts_ns, 0)), ("track-id", GObject.TYPE_INT64, req.obj.track_id if req.obj else -1),
                                   ("od-id", GObject.TYPE_INT64, req.obj.od_id if req.obj else -1),
                                   ("latency-ms", GObject.TYPE_INT64, round(answer.latency_s * 1000))):
            s.set_value(key, GObject.Value(gtype, number))  # 64-bit: a plain int would be a gint
        if answer.json_value is not None:
            s.set_value("json", json.dumps(answer.json_value, separators=(",", ":"), ensure_ascii=False))
        self.post_message(Gst.Message.new_element(self, s))


GObject.type_register(PyVlm)
