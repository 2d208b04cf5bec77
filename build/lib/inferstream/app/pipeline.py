"""AppConfig -> one gst-launch description per stream (each becomes its own bin at run time).

Branch of one stream::

    source ! decode ! [identity eos-after] ! queue ! videoconvert ! video/x-raw,format=RGB
      ! pyinfer [! pyinfer ...] [! pytracker] [! pyvlm] [! pyosd] ! [tee ! queue ! pymsgconv ! pymsgbroker  tee.] ! queue ! sink

With ``infer.device: cuda`` and NVDEC decoding (``decode: nvh264dec``, or ``auto`` where it works), frames stay in
CUDA memory from the decoder to pyinfer and pytracker (no videoconvert: pyinfer letterboxes NV12 on the GPU); a
``cudadownload`` brings them to system memory only before an element that needs pixels there (pyosd, an encoder,
a display).

Every pyinfer of the primary detector joins one batch-group, so the streams batch together; with
``infer.instances: N`` the streams of a process are dealt round-robin over N batch-groups, each with its own copy of
the model (its own CUDA stream and graphs), so that one group's batch runs on the GPU while another's frames are
mapped, written and tracked (``BENCHMARKS.md``, *Worker processes*).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from inferstream.app import gstprops
from inferstream.app.checks import ENCODER, HW_DECODER, SCREEN_SINKS
from inferstream.app.config import AppConfig, Source

BATCH_GROUP: Final = "inferstream"
LIVE_SCHEMES: Final = ("rtsp", "rtsps", "rtspt", "rtp", "udp", "srt", "rtmp")
ENCODER_DEFAULTS: Final = {"speed-preset": "veryfast"}
TEST_DEFAULTS: Final = (640, 480, 30)
TRACK_ID_RANGE: Final = 1_000_000
QUEUE: Final = "queue max-size-buffers=4 max-size-bytes=0 max-size-time=0"


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """One stream's branch and the names of its landmarks (element names are unique across the pipeline).

    Attributes:
        description: gst-launch syntax of the whole branch, source to sink(s).
        total_frames: frames the stream will deliver when known (num-buffers, max-frames), else None.
        entry: element whose sink pad receives the EOS that ends the stream early (SIGINT).
        infer: the primary pyinfer (frame counts, batching stats); ``last``: the last analytics element.
        sinks: the sink elements; the stream is done when each has seen EOS.
        output: the MP4 this stream writes, if any.
        limit: ``max-frames``: the runner lets exactly this many frames past ``{id}_limit`` (identity's
            ``eos-after`` stops the source, but a decoder drains the frames it still holds after that).
        broker: the stream's pymsgbroker, if it publishes messages (its delivery counts end up in the summary).
        group: the batch-group of its primary pyinfer.
    """

    id: str
    kind: str
    target: str
    description: str
    live: bool
    total_frames: int | None
    entry: str
    infer: str
    last: str
    sinks: tuple[str, ...]
    output: str | None = None
    limit: int | None = None
    broker: str | None = None
    group: str = BATCH_GROUP


@dataclass(frozen=True, slots=True)
class Plan:
    streams: tuple[StreamPlan, ...]
    on_stream_error: str = "continue"
    env: dict[str, str] = field(default_factory=dict)  # what gst-launch needs in its environment
    rank_boost: tuple[str, ...] = ()  # decoders to prefer in decodebin (the in-process form of env)


def _props(factory: str, values: dict[str, object], sid: str) -> str:
    """``key=value`` pairs in gst-launch syntax; ``{id}`` in strings becomes the stream id."""
    filled = {k: v.replace("{id}", sid) if isinstance(v, str) else v for k, v in values.items()}
    launch, problems = gstprops.check_properties(factory, filled)
    if problems:  # load_config already reported these; reaching here means a caller skipped it
        raise ValueError(f"{factory}: {problems[0][1]}")
    return " ".join(f"{k}={v}" for k, v in launch.items())


def _canon(values: dict[str, object]) -> dict[str, object]:
    """Property names as GStreamer spells them (``batch_size`` -> ``batch-size``), so defaults merge correctly."""
    return {str(k).replace("_", "-"): v for k, v in values.items()}


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _decode(mode: str, sid: str) -> str:
    if mode == "software":
        return f"decodebin name={sid}_decode force-sw-decoders=true"
    if mode == "auto":
        return f"decodebin name={sid}_decode"
    return f"parsebin ! {mode} name={sid}_decode"


def _source(src: Source, sid: str, decode: str) -> str:
    q = gstprops.to_launch_value
    text = gstprops.PropSpec("s", "string")
    if src.kind == "test":
        w, h, fps = src.width or TEST_DEFAULTS[0], src.height or TEST_DEFAULTS[1], src.framerate or TEST_DEFAULTS[2]
        return _join(f"videotestsrc name={sid}_src pattern={src.test}",
                     f"num-buffers={src.num_buffers}" if src.num_buffers else "", "is-live=true" if src.live else "",
                     f"! video/x-raw,width={w},height={h},framerate={fps}/1")
    if src.kind == "file":
        return f"filesrc name={sid}_src location={q(text, src.file)} ! {_decode(decode, sid)}"
    if src.kind == "uri":
        uri = q(text, src.uri)
        if decode in ("auto", "software"):
            sw = " force-sw-decoders=true" if decode == "software" else ""
            return f"uridecodebin name={sid}_src uri={uri}{sw}"
        return f"urisourcebin name={sid}_src uri={uri} ! {_decode(decode, sid)}"
    caps = ",".join(f"{k}={v}" for k, v in (("width", src.width), ("height", src.height)) if v)
    if src.framerate:
        caps += f"{',' if caps else ''}framerate={src.framerate}/1"
    return _join(f"v4l2src name={sid}_src device={q(text, src.v4l2)}",
                 f"num-buffers={src.num_buffers}" if src.num_buffers else "",
                 f"! video/x-raw,{caps}" if caps else "", "!", _decode(decode, sid))


def _is_live(src: Source) -> bool:
    if src.kind == "uri":
        return str(src.uri).split(":", 1)[0].lower() in LIVE_SCHEMES
    return src.kind == "v4l2" or (src.kind == "test" and src.live)


def _sink(cfg: AppConfig, sid: str) -> tuple[str, str | None]:
    sink = cfg.sink
    if sink.type == "file":
        path = (sink.path or "{id}.mp4").replace("{id}", sid)
        enc = _props(ENCODER, {**ENCODER_DEFAULTS, **_canon(sink.encoder)}, sid)
        location = gstprops.to_launch_value(gstprops.PropSpec("location", "string"), path)
        return (f"{QUEUE} ! videoconvert ! {ENCODER} {enc} ! h264parse ! mp4mux ! "
                f"filesink name={sid}_sink location={location}"), path
    if sink.type == "display":
        video_sink = next(s for s in SCREEN_SINKS if gstprops.element_available(s))
        sync = "true" if sink.sync is None else str(sink.sync).lower()
        return f"{QUEUE} ! videoconvert ! {video_sink} name={sid}_sink sync={sync}", None
    sync = "true" if sink.sync else "false"
    return f"fakesink name={sid}_sink sync={sync}", None


def _stream_identity(index: int, sid: str) -> dict[str, object]:
    """pyinfer's stream-id / source-id (when it has them): it sends them downstream in its sticky stream-info
    event, so pytracker, pymsgconv and probes name the stream as the config does."""
    known = gstprops.element_properties("pyinfer") or {}
    return {k: v for k, v in (("stream-id", sid), ("source-id", index)) if k in known}


def _messages(cfg: AppConfig, sid: str) -> tuple[str, str]:
    """``pymsgconv ! pymsgbroker [! fakesink]`` and the name of its last element (a sink)."""
    assert cfg.messages is not None
    broker = _canon(cfg.messages.broker)
    if "sync" in (gstprops.element_properties("pymsgbroker") or {}):
        broker.setdefault("sync", False)  # a sink clocked to real time would pace the whole stream
    text = (f"{_join(f'pymsgconv name={sid}_msgconv', _props('pymsgconv', cfg.messages.conv, sid))} ! "
            f"{_join(f'pymsgbroker name={sid}_msgbroker', _props('pymsgbroker', broker, sid))}")
    if not gstprops.has_src_pad("pymsgbroker"):
        return text, f"{sid}_msgbroker"
    return f"{text} ! fakesink name={sid}_msgsink sync=false", f"{sid}_msgsink"  # a pass-through broker


def gpu_frames(cfg: AppConfig, src: Source, hardware: bool) -> bool:
    """Whether a source's decoded frames can stay in CUDA memory up to pyinfer (see the module docstring)."""
    decode = src.decode or cfg.decode
    return (cfg.infer.device.startswith("cuda") and src.kind in ("file", "uri")
            and (decode == HW_DECODER or (decode == "auto" and hardware)))


SPLIT_BATCH_FROM: Final = 16  # on CUDA, a batch-group of this many streams or more runs two half batches


def default_batch(cfg: AppConfig, streams: int) -> int:
    """The batch-size of a batch-group of ``streams`` streams when the config gives none: all of them, or on CUDA
    from ``SPLIT_BATCH_FROM`` streams on, half of them (rounded up). Every stream has one frame in flight, so a
    batch of all of them leaves the GPU idle while it is written and tracked; two halves take turns (one on the
    GPU, the other on the host): faster on the H200 than whole batches (``BENCHMARKS.md``, *Worker processes*).
    With pyinfer's ``in-flight`` above 1 the streams' next batch forms while one is written: whole batches."""
    return group_batch(streams, cfg.infer.device.startswith("cuda"), cfg.infer.properties.get("in-flight", 1))


def group_batch(streams: int, cuda: bool, in_flight: object = 1) -> int:
    """``default_batch``'s rule for ``streams`` streams, on CUDA or not, at pyinfer's ``in-flight``."""
    if cuda and streams >= SPLIT_BATCH_FROM and in_flight == 1:
        return -(-streams // 2)
    return max(1, streams)


def stream_plan(cfg: AppConfig, index: int, sid: str, batch_size: int | None = None,
                on_gpu: bool = False, instance: int = 0) -> StreamPlan:
    """``batch_size``: the default batch (streams of this stream's batch-group; default all the config's sources).
    ``on_gpu``: frames stay in CUDA memory from the decoder to the analytics (``gpu_frames``). ``instance``: which
    of the ``infer.instances`` batch-groups the stream's primary pyinfer joins."""
    src = cfg.sources[index]
    decode = src.decode or cfg.decode
    batch = batch_size or default_batch(cfg, len(cfg.sources))
    group = BATCH_GROUP if cfg.infer.instances == 1 else f"{BATCH_GROUP}-{instance}"
    infer = {"batch-size": batch, "batch-group": group, **_stream_identity(index, sid),
             **cfg.infer.properties}
    chain = [f"pyinfer name={sid}_infer {_props('pyinfer', infer, sid)}"]
    for i, props in enumerate(cfg.infer.secondary):
        extra = {"unique-id": i + 2, "batch-size": batch, "batch-group": f"{BATCH_GROUP}-secondary{i}"}
        chain.append(f"pyinfer name={sid}_infer{i + 2} {_props('pyinfer', {**extra, **_canon(props)}, sid)}")
    if cfg.tracker is not None:
        tracker = _canon(cfg.tracker)
        if "first-id" in (gstprops.element_properties("pytracker") or {}):
            tracker.setdefault("first-id", index * TRACK_ID_RANGE + 1)  # ids unique across the streams
        chain.append(_join(f"pytracker name={sid}_tracker", _props("pytracker", tracker, sid)))
    if cfg.vlm is not None:  # pyinfer's stream-info names the stream for it, as for pytracker
        chain.append(_join(f"pyvlm name={sid}_vlm", _props("pyvlm", cfg.vlm, sid)))
    if cfg.osd is not None:
        if on_gpu:
            chain.append(f"cudadownload name={sid}_download")
        chain.append(_join(f"pyosd name={sid}_osd", _props("pyosd", cfg.osd, sid)))
    last = next(e.split()[1].removeprefix("name=") for e in reversed(chain) if not e.startswith("cudadownload"))
    sink, output = _sink(cfg, sid)
    if on_gpu and cfg.osd is None and cfg.sink.type != "fakesink":
        sink = f"cudadownload name={sid}_download ! {sink}"
    sinks = [f"{sid}_sink"]
    if cfg.messages is not None:
        messages, message_sink = _messages(cfg, sid)
        sink = f"tee name={sid}_tee ! {QUEUE} ! {messages}  {sid}_tee. ! {sink}"
        sinks.append(message_sink)
    total = min((n for n in (src.num_buffers, src.max_frames) if n), default=None)
    limit = f"identity name={sid}_limit eos-after={src.max_frames + 1} ! " if src.max_frames else ""
    convert = "" if on_gpu else "! videoconvert ! video/x-raw,format=RGB "
    description = (f"{_source(src, sid, decode)} ! {limit}{QUEUE.replace('queue', f'queue name={sid}_entry', 1)} "
                   f"{convert}! {' ! '.join(chain)} ! {sink}")
    return StreamPlan(id=sid, kind=src.kind, target=src.target, description=description, live=_is_live(src),
                      total_frames=total, entry=f"{sid}_entry", infer=f"{sid}_infer", last=last,
                      sinks=tuple(sinks), output=output, limit=src.max_frames or None,
                      broker=f"{sid}_msgbroker" if cfg.messages is not None else None, group=group)


def build_plan(cfg: AppConfig, only: Sequence[int] | None = None) -> Plan:
    """The run plan of a validated config; ``decode: auto`` prefers nvh264dec when it exists and starts.

    ``only``: the indices of the sources to plan (one worker's shard); each keeps its id, source id and track-id
    range. The streams are dealt round-robin over ``infer.instances`` batch-groups (no more groups than streams);
    the default batch follows from a group's share of them (``default_batch``).
    """
    hardware = gstprops.decoder_works(HW_DECODER)
    ids = cfg.stream_ids()
    picked = list(range(len(ids)) if only is None else only)
    groups = min(cfg.infer.instances, len(picked))
    streams = tuple(stream_plan(cfg, i, ids[i], default_batch(cfg, len(picked[j % groups::groups])),
                                gpu_frames(cfg, cfg.sources[i], hardware), j % groups)
                    for j, i in enumerate(picked))
    uses_auto = any((s.decode or cfg.decode) == "auto" and s.kind != "test" for s in cfg.sources)
    boost = (HW_DECODER,) if hardware and uses_auto else ()
    env = {"GST_PLUGIN_FEATURE_RANK": f"{HW_DECODER}:MAX"} if boost else {}
    return Plan(streams=streams, on_stream_error=cfg.on_stream_error, env=env, rank_boost=boost)


def launch_line(plan: Plan) -> str:
    """The whole run as one gst-launch-1.0 command line (``-e``: Ctrl-C finishes the files)."""
    env = " ".join(f"{k}={v}" for k, v in plan.env.items())
    return _join(env, "gst-launch-1.0 -e", "  ".join(s.description for s in plan.streams))
