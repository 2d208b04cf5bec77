"""Config checks that need GStreamer: element properties, decoders, sinks, source kinds (see config.py)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from inferstream.app import gstprops
from inferstream.app.config import Infer, KeyPath, Problem, Sink, Source
from inferstream.backends.loader import MODEL_SUFFIXES, factory_spec
from inferstream.errors import ConfigError

# config section -> GStreamer element whose properties it holds
SECTION_ELEMENTS: Final = {("tracker",): "pytracker", ("osd",): "pyosd", ("messages", "conv"): "pymsgconv",
                           ("messages", "broker"): "pymsgbroker", ("vlm",): "pyvlm"}
ENCODER: Final = "x264enc"
SCREEN_SINKS: Final = ("glimagesink", "xvimagesink", "ximagesink", "waylandsink", "kmssink")
DECODE_MODES: Final = ("auto", "software")
HW_DECODER: Final = "nvh264dec"


def check_config(data: Mapping[str, Any]) -> list[Problem]:
    """Problems in the raw ``data``; each section that passes the schema on its own is checked, so one bad
    section does not hide the others' problems."""
    sources = _valid_sources(data.get("sources"))
    return _element_sections(data) + _sources(data, sources) + _sink(data, len(sources))


def _valid_sources(raw: Any) -> list[tuple[int, Source]]:
    out = []
    for i, item in enumerate(raw if isinstance(raw, list) else []):
        try:
            out.append((i, Source.model_validate(item)))
        except ValidationError:
            pass  # the schema reports it
    return out


def _props(path: KeyPath, factory: str, values: Any) -> list[Problem]:
    if not isinstance(values, Mapping):
        return []  # the schema reports the wrong type
    _, found = gstprops.check_properties(factory, values)
    return [Problem((*path, key) if key else path, message) for key, message in found]


def _element_sections(data: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    infer = data.get("infer")
    if isinstance(infer, Mapping):
        own = {field.alias or name for name, field in Infer.model_fields.items()}  # instances, model-server...
        problems += _infer_props(("infer",), {k: v for k, v in infer.items() if k not in own})
        secondary = infer.get("secondary")
        for i, props in enumerate(secondary if isinstance(secondary, list) else []):
            problems += _infer_props(("infer", "secondary", i), props)
    for path, factory in SECTION_ELEMENTS.items():
        if path[0] not in data:
            continue  # section absent: element not used
        section: Any = data
        for key in path:
            section = section.get(key) if isinstance(section, Mapping) else None
        problems += _props(path, factory, {} if section is None else section)
    sink = data.get("sink")
    if isinstance(sink, Mapping) and sink.get("type") == "file":
        problems += _props(("sink", "encoder"), ENCODER, sink.get("encoder") or {})
    return problems


def _infer_props(path: KeyPath, props: Any) -> list[Problem]:
    if not isinstance(props, Mapping):
        return [Problem(path, "expected a mapping of pyinfer properties (model, confidence-threshold, ...)")]
    problems = _props(path, "pyinfer", props)
    model = props.get("model")
    config_file = props.get("config-file")
    if config_file is not None:
        problems += _nvinfer_file((*path, "config-file"), str(config_file))
    if model is None and config_file is None:
        problems.append(Problem((*path, "model"), "required key is missing (a model file or module:factory, or an "
                                "nvinfer config-file with onnx-file)"))
    elif isinstance(model, str) and _looks_like_file(model):
        factory = factory_spec(model)
        file = factory[0] if factory else model
        suffix = Path(file).suffix.lower()
        if not Path(file).is_file():
            problems.append(Problem((*path, "model"), f"model file not found: {file}"))
        elif not factory and suffix not in MODEL_SUFFIXES and props.get("backend", "auto") == "auto":
            problems.append(Problem((*path, "model"), f"{model}: no backend loads {suffix or 'suffix-less'} files; "
                                    f"known suffixes: {', '.join(MODEL_SUFFIXES)} (TensorRT engines: give the ONNX "
                                    "file, or force a runtime with backend=torch|onnxruntime)"))
    return problems


def _nvinfer_file(path: KeyPath, config_file: str) -> list[Problem]:
    """An nvinfer config file that cannot be read or used, as a problem now rather than at start."""
    from inferstream.nvinfer_config import read_nvinfer_config

    try:
        read_nvinfer_config(config_file)
    except ConfigError as exc:
        return [Problem(path, str(exc))]
    return []


def _looks_like_file(model: str) -> bool:
    if "://" in model:  # a model on an inference server (grpc://host:8001/name): the backend checks it
        return False
    return (Path(model).suffix != "" and ":" not in model) or os.sep in model or model.startswith(".")


def _decode(path: KeyPath, value: str) -> list[Problem]:
    if value in DECODE_MODES or gstprops.is_decoder(value):
        return []
    return [Problem(path, f"{value!r} is neither {' nor '.join(DECODE_MODES)} nor a decoder element registered "
                          "with GStreamer (e.g. avdec_h264, nvh264dec: see gst-inspect-1.0)")]


def _sources(data: Mapping[str, Any], sources: list[tuple[int, Source]]) -> list[Problem]:
    decode = data.get("decode", "auto")
    problems = _decode(("decode",), decode) if isinstance(decode, str) else []
    seen: dict[str, int] = {}
    for i, src in sources:
        path: KeyPath = ("sources", i)
        sid = src.id or f"stream{i}"
        if sid in seen:
            problems.append(Problem((*path, "id"), f"stream id {sid!r} is already used by sources[{seen[sid]}]"))
        seen.setdefault(sid, i)
        if src.decode is not None:
            problems += (_decode((*path, "decode"), src.decode) if src.kind != "test" else
                         [Problem((*path, "decode"), "test sources are not decoded")])
        if src.kind == "test":
            patterns = gstprops.element_properties("videotestsrc")["pattern"].choices  # type: ignore[index]
            if src.test not in patterns:
                problems.append(Problem((*path, "test"), f"unknown pattern {src.test!r}; videotestsrc has: "
                                        f"{', '.join(patterns)}"))
        elif src.kind == "v4l2" and not gstprops.element_available("v4l2src"):
            problems.append(Problem((*path, "v4l2"), "this GStreamer build has no v4l2src element (gst-plugins-good "
                                    "built without v4l2)"))
        elif src.kind == "uri" and (why := gstprops.uri_supported(str(src.uri))) is not None:
            problems.append(Problem((*path, "uri"), why))
    return problems


def available_sinks() -> dict[str, str | None]:
    """Sink type -> None when usable here, else why not."""
    screen = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    video_sink = next((s for s in SCREEN_SINKS if gstprops.element_available(s)), None)
    display = (None if screen and video_sink else
               "no screen ($DISPLAY and $WAYLAND_DISPLAY are unset)" if not screen else
               f"no video sink element ({', '.join(SCREEN_SINKS)}) in this GStreamer build")
    missing = [e for e in (ENCODER, "h264parse", "mp4mux") if not gstprops.element_available(e)]
    return {"fakesink": None, "file": f"missing {', '.join(missing)}" if missing else None, "display": display,
            "rtsp": "RTSP output needs gst-rtsp-server (GstRtspServer), which inferstream does not drive yet"}


def _sink(data: Mapping[str, Any], n_streams: int) -> list[Problem]:
    try:
        sink = Sink.model_validate(data.get("sink") or {})
    except ValidationError:
        return []  # the schema reports it
    problems: list[Problem] = []
    sinks = available_sinks()
    if sink.type not in sinks:
        return [Problem(("sink", "type"), f"unknown sink type {sink.type!r}; usable here: "
                        f"{', '.join(k for k, v in sinks.items() if v is None)}")]
    if (why := sinks[sink.type]) is not None:
        usable = ", ".join(k for k, v in sinks.items() if v is None)
        return [Problem(("sink", "type"), f"sink type {sink.type!r} is not available here: {why}; usable: {usable}")]
    if sink.type != "file":
        for key, value in (("path", sink.path), ("encoder", sink.encoder or None)):
            if value is not None:
                problems.append(Problem(("sink", key), f"{key} applies to sink type file only"))
    elif n_streams > 1 and sink.path is not None and "{id}" not in sink.path:
        problems.append(Problem(("sink", "path"), f"{n_streams} streams would write the same file: put "
                                "{id} in the path, e.g. out/{id}.mp4"))
    if sink.type == "file" and sink.sync is not None:
        problems.append(Problem(("sink", "sync"), "sync applies to fakesink and display sinks"))
    return problems
