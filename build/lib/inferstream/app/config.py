"""The ``inferstream run`` configuration: YAML -> validated :class:`AppConfig`.

Our own sections are pydantic v2 models (``extra="forbid"``, hyphenated keys as in GStreamer). Sections that are
an element's properties (``infer``, ``tracker``, ``osd``, ``messages``, ``sink.encoder``) are checked against the
real element (``gstprops``). Every problem is reported with its key path and YAML line, all at once, as a
:class:`ConfigFileError`.

Schema (relative paths are relative to the working directory; ``sample:vtest`` and ``sample:person-detector``
name inferstream's sample files; ``{id}`` in a string property becomes the stream id)::

    sources:                      # one branch (one bin) per source; at least one
      - id: cam1                  # optional, default stream<N>; letters, digits, _ and -
        file: clip.mp4            # exactly one of file | uri (file://, rtsp://, http://...) | v4l2 (device) |
                                  #   test (a videotestsrc pattern)
        max-frames: 100           # optional: end the stream after N frames (any kind)
        num-buffers: 100          # test and v4l2 only
        width: 640                # test and v4l2 only (also height, framerate)
        live: false               # test only: produce frames in real time
        decode: auto              # optional override of the top-level decode
    decode: auto                  # auto (nvh264dec preferred when it exists and starts) | software | <decoder>
    infer:                        # pyinfer properties; model is required; all streams share one batch-group
      model: best.onnx            #   (batch-group inferstream, batch-size = number of sources, unless given;
                                  #   on CUDA half of them from 16 on)
      confidence-threshold: 0.3
      instances: 1                # optional: model instances per process, each its own batch-group of an equal
                                  #   share of the streams (batch-size = that share, unless given)
      model-server: {}            # optional: one process holds the model for all workers and runs their batches
                                  #   together (max-batch: 32, delay-ms: 0, capture: powers-of-two |
                                  #   every-sum, mps-priority: normal | below-normal |
                                  #   workers-below-normal; true / {} / false)
      secondary:                  # optional: more pyinfer property sets, chained after the primary
        - {model: other.onnx}
    tracker: {}                   # optional: pytracker properties (first-id defaults to disjoint ranges)
    vlm:                          # optional: pyvlm properties (after the tracker, before the OSD); model required
      model: ./my-vlm-folder      #   a transformers folder, or the model name with backend: openai + server-url
      prompt: Describe the scene.
    osd: {}                       # optional: pyosd properties
    messages:                     # optional: a tee after the analytics into pymsgconv ! pymsgbroker
      conv: {}                    #   pymsgconv properties
      broker: {}                  #   pymsgbroker properties (sync defaults to false)
    sink:
      type: fakesink              # fakesink | file (x264enc + mp4mux per stream) | display (with a screen)
      path: out/{id}.mp4          # file only (default {id}.mp4)
      encoder: {}                 # file only: x264enc properties (default speed-preset=veryfast)
      sync: false                 # fakesink / display
    on-stream-error: continue     # continue (remove the failed stream) | stop (finish the others, exit 1)
    workers: 1                    # worker processes the sources are sharded over (N | auto; --workers wins)
    mps: auto                     # CUDA MPS daemon for 2+ workers on CUDA: auto | on | off (--mps wins)
    worker-restarts: 1            # restarts of a worker that dies mid-run, before its streams are failed
    cluster:                      # optional: the workers as Ray actors on a cluster's nodes (--cluster wins)
      engine: ray                 #   the one engine
      address: auto               #   auto (RAY_ADDRESS, or the cluster `ray start` made here) | HOST:PORT (the
                                  #   head's GCS) | ray://HOST:PORT (Ray Client)
      cpus-per-worker: 1          #   Ray resources each worker asks for
      gpus-per-worker: null       #   default 1 with infer.device cuda, else 0; a fraction shares a GPU
      shared-storage: false       #   every node sees the config's paths (NFS): file sinks allowed on many hosts
      place-timeout: 60           #   seconds a worker may wait for the cluster to place it
"""
from __future__ import annotations

import os
import re
import typing
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from inferstream.app.yamlmap import LineMap, format_path, load_yaml
from inferstream.errors import ConfigError

KeyPath = tuple[Hashable, ...]
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
SOURCE_KINDS = ("file", "uri", "v4l2", "test")


@dataclass(frozen=True, slots=True)
class Problem:
    path: KeyPath
    message: str
    line: int | None = None

    def format(self, origin: str) -> str:
        where = f"{origin}:{self.line}" if self.line is not None else origin
        return f"{where}: {format_path(self.path)}: {self.message}"


class ConfigFileError(ConfigError):
    """The config has problems; ``str()`` lists each as ``file:line: key.path: message``."""

    def __init__(self, origin: str, problems: list[Problem]) -> None:
        self.origin = origin
        self.problems = sorted(problems, key=lambda p: (p.line or 0, format_path(p.path)))
        lines = "\n".join("  " + p.format(origin) for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s) in config {origin}:\n{lines}")


def _hyphen(name: str) -> str:
    return name.replace("_", "-")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=_hyphen, populate_by_name=False, frozen=True)


class Source(_Section):
    """One input stream: exactly one of file, uri, v4l2, test."""

    id: str | None = Field(None, pattern=ID_PATTERN)
    file: str | None = None
    uri: str | None = None
    v4l2: str | None = None
    test: str | None = None
    num_buffers: int | None = Field(None, ge=1)
    max_frames: int | None = Field(None, ge=1)
    width: int | None = Field(None, ge=16, le=16384)
    height: int | None = Field(None, ge=16, le=16384)
    framerate: int | None = Field(None, ge=1, le=1000)
    live: bool = False
    decode: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Source:
        kinds = [k for k in SOURCE_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of {', '.join(SOURCE_KINDS)} (got {', '.join(kinds) or 'none'})")
        kind = kinds[0]
        if self.num_buffers is not None and kind not in ("test", "v4l2"):
            raise ValueError("num-buffers applies to test and v4l2 sources; use max-frames to cut a file or uri")
        if kind not in ("test", "v4l2") and any(v is not None for v in (self.width, self.height, self.framerate)):
            raise ValueError("width, height and framerate apply to test and v4l2 sources only")
        if self.live and kind != "test":
            raise ValueError("live applies to test sources only (the others are live or not by nature)")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in SOURCE_KINDS if getattr(self, k) is not None)

    @property
    def target(self) -> str:
        return str(getattr(self, self.kind))


class ModelServerOptions(_Section):
    """``infer.model-server``: one process holds the model for every worker (``app/serving.py``)."""

    max_batch: int = Field(32, ge=1)
    delay_ms: float = Field(0.0, ge=0)
    # on a GPU: "every-sum" captures a graph for every sum of whole requests, not only the powers of two
    capture: Literal["powers-of-two", "every-sum"] = "powers-of-two"
    # under MPS: "below-normal" starts the server as a below-normal client (the workers' own kernels pass its
    # forwards); "workers-below-normal" starts the workers so (the server's forwards pass theirs)
    mps_priority: Literal["normal", "below-normal", "workers-below-normal"] = "normal"


class Infer(_Section):
    """pyinfer properties (checked against the element) plus ``secondary``: more pyinfer property sets."""

    model_config = ConfigDict(extra="allow", alias_generator=_hyphen, populate_by_name=False, frozen=True)
    secondary: list[dict[str, Any]] = Field(default_factory=list)
    instances: int = Field(1, ge=1)
    model_server: ModelServerOptions | None = None

    @field_validator("model_server", mode="before")
    @classmethod
    def _server_switch(cls, value: Any) -> Any:
        return {} if value is True or value is None else None if value is False else value

    @property
    def properties(self) -> dict[str, Any]:
        """The pyinfer properties as GStreamer spells them (``in_flight`` -> ``in-flight``)."""
        return {str(k).replace("_", "-"): v for k, v in (self.model_extra or {}).items()}

    @property
    def device(self) -> str:
        """pyinfer's ``device`` ("cpu" unless set): what the workers, MPS, the cluster and the CUDA-memory branch
        decide by."""
        return str((self.model_extra or {}).get("device", "cpu"))


class Messages(_Section):
    conv: dict[str, Any] = Field(default_factory=dict)
    broker: dict[str, Any] = Field(default_factory=dict)


class Sink(_Section):
    type: str = "fakesink"
    path: str | None = None
    encoder: dict[str, Any] = Field(default_factory=dict)
    sync: bool | None = None


class Cluster(_Section):
    """Where and how the workers run as Ray actors (``app/cluster.py``)."""

    engine: Literal["ray"] = "ray"
    address: str = "auto"
    cpus_per_worker: float = Field(1.0, ge=0)
    gpus_per_worker: float | None = Field(None, ge=0)
    shared_storage: bool = False
    place_timeout: float = Field(60.0, gt=0)


class AppConfig(_Section):
    sources: list[Source] = Field(min_length=1)
    decode: str = "auto"
    infer: Infer
    tracker: dict[str, Any] | None = None
    osd: dict[str, Any] | None = None
    vlm: dict[str, Any] | None = None
    messages: Messages | None = None
    sink: Sink = Field(default_factory=Sink)
    on_stream_error: Literal["continue", "stop"] = "continue"
    workers: int | Literal["auto"] = 1
    worker_restarts: int = Field(1, ge=0, le=100)
    mps: Literal["auto", "on", "off"] = "auto"
    cluster: Cluster | None = None

    @field_validator("tracker", "osd", "messages", "cluster", mode="before")  # vlm needs its model: no empty form
    @classmethod
    def _present_means_on(cls, value: Any) -> Any:
        return {} if value is None else value  # `tracker:` with no properties enables it with defaults

    @field_validator("vlm", mode="before")
    @classmethod
    def _vlm_model(cls, value: Any) -> Any:
        if not isinstance(value, Mapping) or not value.get("model"):
            raise ValueError("vlm needs model: a transformers model folder, or the server's model name (with "
                             "backend: openai and server-url)")
        return value

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, value: Any) -> Any:
        if value == "auto" or (type(value) is int and value >= 1):
            return value
        raise ValueError(f"expected a whole number of at least 1, or auto (got {value!r})")

    def stream_ids(self) -> list[str]:
        return [s.id or f"stream{i}" for i, s in enumerate(self.sources)]


# ---------------------------------------------------------------------------------------------------------------
def load_config(config: Mapping[str, Any] | str | Path) -> AppConfig:
    """Read and validate a config file (str or Path) or an already-parsed mapping.

    Raises:
        ConfigFileError: every problem, with key path and YAML line.
    """
    if isinstance(config, Mapping):
        origin, data, lines = "<dict>", _plain(config), LineMap()
    else:
        origin = str(config)
        try:
            text = Path(config).read_text()
        except OSError as exc:
            raise ConfigFileError(origin, [Problem((), f"cannot read the config: {exc.strerror or exc}")]) from None
        try:
            data, lines = load_yaml(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            what = getattr(exc, "problem", None) or str(exc)
            raise ConfigFileError(origin, [Problem((), f"YAML syntax: {what}",
                                                   mark.line + 1 if mark else None)]) from None
    problems = [Problem(path, "duplicate key (the later one would win)", line) for path, line in lines.duplicates]
    if not isinstance(data, dict):
        raise ConfigFileError(origin, [Problem((), "the config must be a mapping with sources, infer, ... keys",
                                               lines.line_of(()))])
    data = _expand_samples(data, (), problems)
    cfg: AppConfig | None = None
    try:
        cfg = AppConfig.model_validate(data)
    except ValidationError as exc:
        problems += [_from_pydantic(err) for err in exc.errors()]
    from inferstream.app.checks import check_config  # gi: imported only once the schema is fine

    problems += check_config(data)
    if problems:
        raise ConfigFileError(origin, [Problem(p.path, p.message, lines.line_of(p.path)) for p in problems])
    assert cfg is not None
    return cfg


def _plain(config: Mapping[str, Any]) -> Any:
    """Paths and tuples in a dict config -> plain YAML-like values."""
    if isinstance(config, Mapping):
        return {str(k): _plain(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [_plain(v) for v in config]
    return str(config) if isinstance(config, Path) else config


_SAMPLES = {"vtest": "vtest_path", "person-detector": "person_detector"}


def _expand_samples(value: Any, path: KeyPath, problems: list[Problem]) -> Any:
    """``sample:vtest`` / ``sample:person-detector`` -> the cached sample file; ``~`` -> the home directory."""
    if isinstance(value, dict):
        return {k: _expand_samples(v, (*path, k), problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_samples(v, (*path, i), problems) for i, v in enumerate(value)]
    if isinstance(value, str) and value.startswith("sample:"):
        name = value[len("sample:"):]
        if name not in _SAMPLES:
            problems.append(Problem(path, f"unknown sample {name!r}; known: {', '.join(_SAMPLES)}"))
            return value
        from inferstream import samples

        try:
            return str(getattr(samples, _SAMPLES[name])())
        except Exception as exc:  # noqa: BLE001
            problems.append(Problem(path, f"sample {name!r} is unavailable: {exc}"))
            return value
    if isinstance(value, str) and value.startswith("~"):
        return os.path.expanduser(value)
    return value


def _from_pydantic(err: Any) -> Problem:
    loc = tuple(err["loc"])
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        from inferstream.app.gstprops import unknown_key_message

        return Problem(loc, unknown_key_message(f"unknown key {loc[-1]!r}", str(loc[-1]), _valid_keys(loc[:-1])))
    if kind == "missing":
        return Problem(loc, "required key is missing")
    if kind == "string_pattern_mismatch" and loc[-1] == "id":
        return Problem(loc, "stream ids are 1-64 letters, digits, _ or - (they name files and elements)")
    return Problem(loc, re.sub(r"^Value error, ", "", msg))


def _valid_keys(loc: KeyPath) -> list[str]:
    """The keys the section at ``loc`` accepts (for "did you mean")."""
    model: Any = AppConfig
    for part in loc:
        if isinstance(part, int):
            continue
        fields = {f.alias or n: f for n, f in model.model_fields.items()}
        if part not in fields:
            return []
        model = _section_type(fields[part].annotation)
        if model is None:
            return []
    return sorted(f.alias or n for n, f in model.model_fields.items())


def _section_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if (found := _section_type(arg)) is not None:
            return found
    return None
