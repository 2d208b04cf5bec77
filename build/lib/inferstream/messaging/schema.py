"""Payloads: DeepStream ``nvmsgconv`` JSON (full and minimal) and a compact inferstream JSON, plus their config.

DeepStream parity. Field names, nesting and value types follow what ``nvmsgconv`` emits when it walks object
metadata directly (``msg2p-newapi=1``): ``sources/libs/nvmsgconv/deepstream_schema/dsmeta_payload.cpp``
(``generate_dsmeta_message`` / ``generate_dsmeta_message_minimal``); the older event-meta path
(``eventmsg_payload.cpp``, ``generate_schema_message``) builds the same envelope. In short:

* full schema, one message per object: ``messageid`` (uuid4), ``mdsversion`` "1.0", ``@timestamp`` (RFC 3339 UTC,
  milliseconds, ``Z``), ``place``, ``sensor``, ``analyticsModule`` (static, from the config file), ``object``
  (``id`` = tracking id as a decimal string, 18446744073709551615 when untracked; ``speed``/``direction``/
  ``orientation``; one sub-object named after the label holding ``confidence``; ``bbox`` with integer
  ``topleftx``/``toplefty``/``bottomrightx``/``bottomrighty`` in frame pixels; ``location``; ``coordinate``),
  ``event`` (``id`` uuid4, ``type`` "") and ``videoPath`` "".
* minimal schema, one message per frame: ``version`` "4.0", ``id`` (frame number), ``@timestamp``, ``sensorId``,
  ``objects`` as ``"trackingId|left|top|right|bottom|label"`` strings (numbers printed like C++ ``ostream``, i.e.
  ``%g``).

Deliberate differences, all additive: ``object.orientation`` carries the oriented-box angle in degrees when the
model gives one (nvmsgconv always writes 0); a source without a ``sensorN``/``placeN``/``analyticsN`` group gets a
default description (sensor id = the stream id) where nvmsgconv would log "No entry for ..." and emit ``null``.
Secondary classifications go where nvmsgconv files classifier attributes, in the object-type sub-object as
``"<classifier-type>": "<label>"`` (full schema; the minimal one has no place for them); the compact schemas list
them as ``classifications`` (``type``, ``label``, ``confidence``) on objects that have any.
JSON is written compact (nvmsgconv pretty-prints); parsers see no difference.

Config file (nvmsgconv's ``msgconv_config.yml`` / ``.txt``): groups ``sensorN``, ``placeN``, ``analyticsN`` where
N is the frame's ``source_id``; each has ``enable`` (0/1) and:

* ``sensorN``: ``id``, ``type``, ``description``, ``location`` ("lat;lon;alt"), ``coordinate`` ("x;y;z")
* ``placeN``: ``id``, ``name``, ``type``, ``location``, ``coordinate``, ``place-sub-field1..3`` (written as the
  ``place-sub-field`` sub-object's ``id``, ``name``, ``level``)
* ``analyticsN``: ``id``, ``description``, ``source``, ``version``

YAML (``.yml``/``.yaml``) and GLib key-file (``[sensor0]`` sections, anything else) are both read. Unlike
nvmsgconv, unknown groups or keys are errors, not console notes.
"""
from __future__ import annotations

import configparser
import functools
import json
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from inferstream import __version__
from inferstream.errors import ConfigError
from inferstream.messaging.events import FrameEvent, ObjectEvent

SchemaName = Literal["deepstream-full", "deepstream-minimal", "inferstream-frame", "inferstream-object"]
SCHEMAS: Final[tuple[SchemaName, ...]] = ("deepstream-full", "deepstream-minimal", "inferstream-frame",
                                          "inferstream-object")
UNTRACKED_OBJECT_ID: Final = 0xFFFFFFFFFFFFFFFF  # NvDsObjectMeta.object_id of an untracked object
_RESERVED_OBJECT_KEYS: Final = frozenset({"id", "speed", "direction", "orientation", "bbox", "location",
                                          "coordinate", "signature"})
Triple = tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class SensorInfo:
    id: str
    type: str = "Camera"
    description: str = ""
    location: Triple = (0.0, 0.0, 0.0)  # lat, lon, alt
    coordinate: Triple = (0.0, 0.0, 0.0)  # x, y, z


@dataclass(frozen=True, slots=True)
class PlaceInfo:
    id: str = ""
    name: str = ""
    type: str = ""
    location: Triple = (0.0, 0.0, 0.0)
    coordinate: Triple = (0.0, 0.0, 0.0)
    sub_field1: str = ""
    sub_field2: str = ""
    sub_field3: str = ""


@dataclass(frozen=True, slots=True)
class AnalyticsInfo:
    id: str = "inferstream"
    description: str = ""
    source: str = "inferstream"
    version: str = __version__


@dataclass(frozen=True, slots=True)
class MsgConvConfig:
    """Static descriptions keyed by ``source_id`` (the N of ``sensorN`` etc.)."""

    sensors: Mapping[int, SensorInfo] = field(default_factory=dict)
    places: Mapping[int, PlaceInfo] = field(default_factory=dict)
    analytics: Mapping[int, AnalyticsInfo] = field(default_factory=dict)

    def sensor(self, event: FrameEvent) -> SensorInfo:
        return self.sensors.get(event.source_id) or SensorInfo(id=event.stream_id)

    def place(self, event: FrameEvent) -> PlaceInfo:
        return self.places.get(event.source_id) or PlaceInfo(id=str(event.source_id))

    def module(self, event: FrameEvent) -> AnalyticsInfo:
        return self.analytics.get(event.source_id) or AnalyticsInfo()


# group -> {config key: dataclass field}
_KEYS: Final[dict[str, dict[str, str]]] = {
    "sensor": {"id": "id", "type": "type", "description": "description", "location": "location",
               "coordinate": "coordinate"},
    "place": {"id": "id", "name": "name", "type": "type", "location": "location", "coordinate": "coordinate",
              "place-sub-field1": "sub_field1", "place-sub-field2": "sub_field2", "place-sub-field3": "sub_field3"},
    "analytics": {"id": "id", "description": "description", "source": "source", "version": "version"},
}
_TYPES: Final[dict[str, type[SensorInfo | PlaceInfo | AnalyticsInfo]]] = {
    "sensor": SensorInfo, "place": PlaceInfo, "analytics": AnalyticsInfo}


def _triple(where: str, key: str, value: object) -> Triple:
    parts: object = value.split(";") if isinstance(value, str) else value
    try:
        if not isinstance(parts, (list, tuple)):
            raise TypeError
        a, b, c = (float(p) for p in parts)
    except (TypeError, ValueError):
        what = "lat;lon;alt" if key == "location" else "x;y;z"
        raise ConfigError(f"{where}: {key} must look like '{what}' (three numbers), got {value!r}") from None
    return (a, b, c)


def _parse_group(where: str, group: str, values: Mapping[str, object]) -> tuple[str, int, object] | None:
    kind = group.rstrip("0123456789")
    index = group[len(kind):]
    if kind not in _KEYS or not index:
        raise ConfigError(f"{where}: unknown group [{group}]; expected sensorN, placeN or analyticsN")
    if str(values.get("enable", 0)).strip().lower() not in ("1", "true", "yes"):
        return None
    kwargs: dict[str, object] = {}
    for key, value in values.items():
        if key == "enable":
            continue
        if key not in _KEYS[kind]:
            raise ConfigError(f"{where}: unknown key {key!r} in [{group}]; known: {sorted(_KEYS[kind])}")
        attr = _KEYS[kind][key]
        kwargs[attr] = _triple(f"{where} [{group}]", key, value) if key in ("location", "coordinate") \
            else str(value).strip().strip('"')
    if kind == "sensor" and "id" not in kwargs:
        raise ConfigError(f"{where}: [{group}] needs an id")
    return kind, int(index), _TYPES[kind](**kwargs)  # type: ignore[arg-type]


def parse_msgconv_config(groups: Mapping[str, Mapping[str, object]], *, where: str = "msgconv config") -> MsgConvConfig:
    """Build the config from already-parsed groups (``{"sensor0": {"enable": 1, "id": ...}, ...}``).

    Raises:
        ConfigError: unknown group or key, malformed location/coordinate, sensor without id.
    """
    out: dict[str, dict[int, Any]] = {"sensor": {}, "place": {}, "analytics": {}}
    for group, values in groups.items():
        if not isinstance(values, Mapping):
            raise ConfigError(f"{where}: [{group}] must be a mapping of keys, got {type(values).__name__}")
        parsed = _parse_group(where, str(group), {str(k): v for k, v in values.items()})
        if parsed is not None:
            kind, index, info = parsed
            out[kind][index] = info
    return MsgConvConfig(out["sensor"], out["place"], out["analytics"])


def load_msgconv_config(path: str | Path) -> MsgConvConfig:
    """Read an nvmsgconv config file: YAML for ``.yml``/``.yaml``, GLib key-file (INI) otherwise.

    Raises:
        ConfigError: unreadable file, syntax error or any error of :func:`parse_msgconv_config`.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"msgconv config {path}: {exc.strerror}") from exc
    try:
        if path.suffix in (".yml", ".yaml"):
            groups = yaml.safe_load(text) or {}
            if not isinstance(groups, dict):
                raise ConfigError(f"msgconv config {path}: top level must be a mapping of groups")
        else:
            ini = configparser.ConfigParser(interpolation=None, delimiters=("=",), comment_prefixes=("#",))
            ini.optionxform = str  # type: ignore[assignment,method-assign]
            ini.read_string(text, source=str(path))
            groups = {s: dict(ini.items(s)) for s in ini.sections()}
    except (yaml.YAMLError, configparser.Error) as exc:
        raise ConfigError(f"msgconv config {path}: {exc}") from exc
    return parse_msgconv_config(groups, where=f"msgconv config {path}")


def rfc3339_ms(ns: int) -> str:
    """``2018-04-11T04:59:59.828Z`` for a time in ns since the epoch (what nvmsgconv's generate_ts_rfc3339 writes)."""
    sec, rem = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{rem // 1_000_000:03d}Z"


def _xyz(t: Triple) -> dict[str, float]:
    return {"x": t[0], "y": t[1], "z": t[2]}


def _latlon(t: Triple) -> dict[str, float]:
    return {"lat": t[0], "lon": t[1], "alt": t[2]}


def _object_id(obj: ObjectEvent) -> int:
    return UNTRACKED_OBJECT_ID if obj.track_id is None else obj.track_id & UNTRACKED_OBJECT_ID


def deepstream_full(event: FrameEvent, obj: ObjectEvent, config: MsgConvConfig, timestamp: str) -> dict[str, Any]:
    """One nvmsgconv full-schema message for one object (see the module docstring for the source file)."""
    if obj.label in _RESERVED_OBJECT_KEYS:
        raise ValueError(f"label {obj.label!r} collides with a DeepStream object field; rename the class")
    sensor, place, module = config.sensor(event), config.place(event), config.module(event)
    x1, y1, x2, y2 = obj.bbox
    kind: dict[str, Any] = {"confidence": obj.confidence}
    for name, label, _ in obj.attributes:  # where nvmsgconv files classifier results: vehicle "color": "red"
        if name in kind:
            raise ValueError(f"classifier-type {name!r} appears twice (or is 'confidence') on one object")
        kind[name] = label
    return {
        "messageid": str(uuid.uuid4()),
        "mdsversion": "1.0",
        "@timestamp": timestamp,
        "place": {"id": place.id, "name": place.name, "type": place.type, "location": _latlon(place.location),
                  "place-sub-field": {"id": place.sub_field1, "name": place.sub_field2, "level": place.sub_field3,
                                      "coordinate": _xyz(place.coordinate)}},
        "sensor": {"id": sensor.id, "type": sensor.type, "description": sensor.description,
                   "location": _latlon(sensor.location), "coordinate": _xyz(sensor.coordinate)},
        "analyticsModule": {"id": module.id, "description": module.description, "source": module.source,
                            "version": module.version},
        "object": {"id": str(_object_id(obj)), "speed": 0.0, "direction": 0.0,
                   "orientation": 0.0 if obj.angle_rad is None else math.degrees(obj.angle_rad),
                   obj.label: kind,
                   "bbox": {"topleftx": int(x1), "toplefty": int(y1), "bottomrightx": int(x2), "bottomrighty": int(y2)},
                   "location": {}, "coordinate": {}},
        "event": {"id": str(uuid.uuid4()), "type": ""},
        "videoPath": "",
    }


def deepstream_minimal(event: FrameEvent, config: MsgConvConfig, timestamp: str) -> dict[str, Any]:
    """One nvmsgconv minimal-schema message for the whole frame."""
    sensor = config.sensors.get(event.source_id)
    return {
        "version": "4.0",
        "id": event.frame_number,
        "@timestamp": timestamp,
        "sensorId": sensor.id if sensor is not None else event.stream_id,
        "objects": [f"{_object_id(o)}|{o.bbox[0]:g}|{o.bbox[1]:g}|{o.bbox[2]:g}|{o.bbox[3]:g}|{o.label}"
                    for o in event.objects],
    }


def _compact_object(obj: ObjectEvent) -> dict[str, Any]:
    """The object's fields; ``mask`` (COCO RLE of the box crop: ``origin`` [x, y], ``size`` [h, w], ``counts``) and
    ``keypoints`` ([[x, y, score], ...]) only when the model gives them."""
    out = {"label": obj.label, "class_id": obj.class_id, "confidence": round(obj.confidence, 4),
           "bbox": [round(v, 2) for v in obj.bbox], "angle_rad": obj.angle_rad, "track_id": obj.track_id}
    if obj.mask is not None:
        x, y, h, w, counts = obj.mask
        out["mask"] = {"origin": [x, y], "size": [h, w], "counts": list(counts)}
    if obj.keypoints is not None:
        out["keypoints"] = [[round(px, 2), round(py, 2), round(score, 4)] for px, py, score in obj.keypoints]
    if obj.attributes:
        out["classifications"] = [{"type": k, "label": v, "confidence": round(c, 4)} for k, v, c in obj.attributes]
    return out


def _compact_header(event: FrameEvent, timestamp: str, schema: str) -> dict[str, Any]:
    return {"schema": schema, "messageid": str(uuid.uuid4()), "@timestamp": timestamp, "stream_id": event.stream_id,
            "source_id": event.source_id, "frame": event.frame_number, "pts_ns": event.pts_ns,
            "ntp_ns": event.ntp_ns, "width": event.width, "height": event.height}


def inferstream_frame(event: FrameEvent, timestamp: str) -> dict[str, Any]:
    """Compact per-frame message: header + ``objects`` (bbox ``[x1, y1, x2, y2]`` px, angle in radians)."""
    return {**_compact_header(event, timestamp, "inferstream.frame/1"),
            "objects": [_compact_object(o) for o in event.objects]}


def inferstream_object(event: FrameEvent, obj: ObjectEvent, timestamp: str) -> dict[str, Any]:
    """Compact per-object message: header + ``object``."""
    return {**_compact_header(event, timestamp, "inferstream.object/1"), "object": _compact_object(obj)}


class MsgConverter:
    """FrameEvent -> JSON payloads (bytes), with nvmsgconv's ``frame-interval`` throttling.

    Args:
        schema: one of :data:`SCHEMAS`.
        config: sensor/place/analytics descriptions (defaults derived from the event when absent).
        frame_interval: convert only frames whose ``frame_number`` is a multiple of this (nvmsgconv's
            ``frame-interval``, default 30 as there); 1 converts every frame.
        skip_empty: frames without objects produce no payload (the per-object schemas never produce one).
        clock: wall clock in ns for ``@timestamp`` when the event has no ``ntp_ns``.
    """

    def __init__(self, schema: SchemaName, config: MsgConvConfig | None = None, *, frame_interval: int = 30,
                 skip_empty: bool = True, clock: Callable[[], int] = time.time_ns) -> None:
        if schema not in SCHEMAS:
            raise ValueError(f"unknown payload schema {schema!r}; known: {list(SCHEMAS)}")
        if frame_interval < 1:
            raise ValueError(f"frame_interval must be >= 1, got {frame_interval}")
        self.schema: Final = schema
        self.config: Final = config or MsgConvConfig()
        self.frame_interval: Final = frame_interval
        self.skip_empty: Final = skip_empty
        self._clock = clock

    def convert(self, event: FrameEvent) -> list[bytes]:
        """Payloads for this frame, in object order; ``[]`` when throttled or empty."""
        if event.frame_number % self.frame_interval or (self.skip_empty and not event.objects):
            return []
        ts = rfc3339_ms(event.ntp_ns if event.ntp_ns is not None else self._clock())
        if self.schema == "deepstream-full":
            docs = [deepstream_full(event, o, self.config, ts) for o in event.objects]
        elif self.schema == "deepstream-minimal":
            docs = [deepstream_minimal(event, self.config, ts)]
        elif self.schema == "inferstream-frame":
            docs = [inferstream_frame(event, ts)]
        else:
            docs = [inferstream_object(event, o, ts) for o in event.objects]
        return [json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode() for d in docs]


class PayloadValidationError(ValueError):
    """A payload does not match its JSON Schema; the message names the failing path."""


@functools.cache
def _validator(schema_name: str) -> Any:
    import jsonschema  # type: ignore[import-untyped]  # optional extra "brokers"

    if schema_name not in SCHEMAS:
        raise ValueError(f"unknown payload schema {schema_name!r}; known: {list(SCHEMAS)}")
    text = resources.files("inferstream.messaging").joinpath("schemas", f"{schema_name}.json").read_text()
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validate(payload: bytes | str | Mapping[str, Any], schema_name: SchemaName) -> None:
    """Check one payload against ``schemas/<schema_name>.json``.

    Raises:
        PayloadValidationError: the payload is not JSON or does not match; names the JSON path.
        ValueError: unknown schema name.
    """
    validator = _validator(schema_name)
    try:
        doc = json.loads(payload) if isinstance(payload, (bytes, str)) else payload
    except json.JSONDecodeError as exc:
        raise PayloadValidationError(f"{schema_name}: payload is not JSON: {exc}") from exc
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = "$" + "".join(f"[{p!r}]" for p in e.absolute_path)
        raise PayloadValidationError(f"{schema_name}: {path}: {e.message} ({len(errors)} error(s))")
