"""Payload builders, the msgconv config parser, frame-interval throttling and JSON Schema validation."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from inferstream.errors import ConfigError
from inferstream.messaging.events import FrameEvent, ObjectEvent
from inferstream.messaging.schema import (
    SCHEMAS,
    MsgConverter,
    PayloadValidationError,
    load_msgconv_config,
    parse_msgconv_config,
    rfc3339_ms,
    validate,
)

T0_NS = 1_523_422_799_828_000_000  # 2018-04-11T04:59:59.828Z, the timestamp of nvmsgconv's own examples

YAML_CONFIG = """\
sensor0:
  enable: 1
  type: Camera
  id: CAMERA_ID
  location: 45.293701447;-75.8303914499;48.1557479338
  description: "Entrance of Garage Right Lane"
  coordinate: 5.2;10.1;11.2
place0:
  enable: 1
  id: 1
  type: garage
  name: XYZ
  location: 30.32;-40.55;100.0
  coordinate: 1.0;2.0;3.0
  place-sub-field1: walsh
  place-sub-field2: lane1
  place-sub-field3: P2
analytics0:
  enable: 1
  id: XYZ
  description: "Vehicle Detection and License Plate Recognition"
  source: OpenALR
  version: 1.0
sensor1:
  enable: 0
  id: disabled
"""


def _event(objects: tuple[ObjectEvent, ...] | None = None, frame: int = 0, ntp: int | None = T0_NS) -> FrameEvent:
    if objects is None:
        objects = (ObjectEvent("person", 0, 0.9, (10.4, 20.6, 110.9, 220.2), None, 7),
                   ObjectEvent("car", 2, 0.5, (300.0, 40.0, 420.5, 100.25), math.pi / 6, None))
    return FrameEvent("cam-a", 0, frame, 123_000_000, ntp, 1920, 1080, objects)


@pytest.fixture
def config(tmp_path: Path) -> Any:
    path = tmp_path / "msgconv_config.yml"
    path.write_text(YAML_CONFIG)
    return load_msgconv_config(path)


def test_rfc3339_ms_matches_nvmsgconv_format() -> None:
    assert rfc3339_ms(T0_NS) == "2018-04-11T04:59:59.828Z"
    assert rfc3339_ms(0) == "1970-01-01T00:00:00.000Z"


@pytest.mark.parametrize("schema", SCHEMAS)
def test_converter_payloads_validate_against_their_schema(schema: Any, config: Any) -> None:
    payloads = MsgConverter(schema, config, frame_interval=1).convert(_event())
    assert payloads
    for p in payloads:
        validate(p, schema)


def test_deepstream_full_is_one_message_per_object_with_nvmsgconv_fields(config: Any) -> None:
    docs = [json.loads(p) for p in MsgConverter("deepstream-full", config, frame_interval=1).convert(_event())]
    assert len(docs) == 2
    person, car = docs
    assert list(person) == ["messageid", "mdsversion", "@timestamp", "place", "sensor", "analyticsModule",
                            "object", "event", "videoPath"]
    assert person["mdsversion"] == "1.0" and person["@timestamp"] == "2018-04-11T04:59:59.828Z"
    assert person["sensor"] == {"id": "CAMERA_ID", "type": "Camera", "description": "Entrance of Garage Right Lane",
                                "location": {"lat": 45.293701447, "lon": -75.8303914499, "alt": 48.1557479338},
                                "coordinate": {"x": 5.2, "y": 10.1, "z": 11.2}}
    assert person["place"]["place-sub-field"] == {"id": "walsh", "name": "lane1", "level": "P2",
                                                  "coordinate": {"x": 1.0, "y": 2.0, "z": 3.0}}
    assert person["analyticsModule"] == {"id": "XYZ", "description": "Vehicle Detection and License Plate "
                                         "Recognition", "source": "OpenALR", "version": "1.0"}
    assert person["object"]["id"] == "7"
    assert person["object"]["person"] == {"confidence": pytest.approx(0.9)}
    assert person["object"]["bbox"] == {"topleftx": 10, "toplefty": 20, "bottomrightx": 110, "bottomrighty": 220}
    assert car["object"]["id"] == str(0xFFFFFFFFFFFFFFFF)  # UNTRACKED_OBJECT_ID, printed as nvmsgconv's %lu
    assert car["object"]["orientation"] == pytest.approx(30.0)
    assert person["messageid"] != car["messageid"] and person["event"]["type"] == ""


def test_deepstream_minimal_objects_are_pipe_strings(config: Any) -> None:
    (payload,) = MsgConverter("deepstream-minimal", config, frame_interval=1).convert(_event(frame=90))
    doc = json.loads(payload)
    assert doc == {"version": "4.0", "id": 90, "@timestamp": "2018-04-11T04:59:59.828Z", "sensorId": "CAMERA_ID",
                   "objects": ["7|10.4|20.6|110.9|220.2|person",
                               "18446744073709551615|300|40|420.5|100.25|car"]}


def test_inferstream_frame_keeps_everything() -> None:
    (payload,) = MsgConverter("inferstream-frame", frame_interval=1).convert(_event(ntp=None))
    doc = json.loads(payload)
    assert doc["stream_id"] == "cam-a" and doc["pts_ns"] == 123_000_000 and doc["ntp_ns"] is None
    assert doc["objects"][1] == {"label": "car", "class_id": 2, "confidence": 0.5,
                                 "bbox": [300.0, 40.0, 420.5, 100.25], "angle_rad": pytest.approx(math.pi / 6),
                                 "track_id": None}


def test_converter_without_config_uses_stream_defaults() -> None:
    doc = json.loads(MsgConverter("deepstream-full", frame_interval=1).convert(_event())[0])
    assert doc["sensor"]["id"] == "cam-a" and doc["place"]["id"] == "0"
    assert doc["analyticsModule"]["id"] == "inferstream"


def test_converter_frame_interval_throttles_like_nvmsgconv() -> None:
    conv = MsgConverter("inferstream-frame", frame_interval=30)
    produced = [f for f in range(100) if conv.convert(_event(frame=f))]
    assert produced == [0, 30, 60, 90]


def test_converter_skips_empty_frames_unless_asked() -> None:
    empty = _event(objects=())
    assert MsgConverter("deepstream-minimal", frame_interval=1).convert(empty) == []
    (payload,) = MsgConverter("deepstream-minimal", frame_interval=1, skip_empty=False).convert(empty)
    validate(payload, "deepstream-minimal")


def test_converter_timestamp_falls_back_to_clock() -> None:
    conv = MsgConverter("inferstream-object", frame_interval=1, clock=lambda: T0_NS + 1_000_000)
    assert json.loads(conv.convert(_event(ntp=None))[0])["@timestamp"] == "2018-04-11T04:59:59.829Z"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"schema": "protobuf"}, "unknown payload schema 'protobuf'"),
    ({"schema": "deepstream-full", "frame_interval": 0}, "frame_interval must be >= 1"),
])
def test_converter_rejects_bad_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MsgConverter(**kwargs)


def test_deepstream_full_rejects_label_colliding_with_a_field() -> None:
    event = _event(objects=(ObjectEvent("bbox", 0, 0.5, (0, 0, 1, 1)),))
    with pytest.raises(ValueError, match="label 'bbox' collides"):
        MsgConverter("deepstream-full", frame_interval=1).convert(event)


def test_load_msgconv_config_reads_yaml_and_skips_disabled(config: Any) -> None:
    assert set(config.sensors) == {0}
    assert config.places[0].sub_field3 == "P2" and config.places[0].location == (30.32, -40.55, 100.0)
    assert config.analytics[0].version == "1.0"


def test_load_msgconv_config_reads_key_file(tmp_path: Path) -> None:
    path = tmp_path / "msgconv_config.txt"
    path.write_text("[sensor3]\nenable=1\ntype=Camera\nid=gate\nlocation=1;2;3\ncoordinate=4;5;6\n"
                    "description=Gate camera\n")
    cfg = load_msgconv_config(path)
    assert cfg.sensors[3].id == "gate" and cfg.sensors[3].coordinate == (4.0, 5.0, 6.0)


@pytest.mark.parametrize(("groups", "match"), [
    ({"camera0": {"enable": 1}}, r"unknown group \[camera0\]"),
    ({"sensor": {"enable": 1, "id": "x"}}, r"unknown group \[sensor\]"),
    ({"sensor0": {"enable": 1, "id": "x", "lane": "1"}}, "unknown key 'lane' in"),
    ({"sensor0": {"enable": 1, "id": "x", "location": "1;2"}}, "location must look like 'lat;lon;alt'"),
    ({"place0": {"enable": 1, "coordinate": "a;b;c"}}, "coordinate must look like 'x;y;z'"),
    ({"sensor0": {"enable": 1, "type": "Camera"}}, r"\[sensor0\] needs an id"),
    ({"sensor0": "yes"}, r"\[sensor0\] must be a mapping"),
])
def test_parse_msgconv_config_errors(groups: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_msgconv_config(groups)


def test_load_msgconv_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="No such file"):
        load_msgconv_config(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_msgconv_config(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("sensor0: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_msgconv_config(broken)


def test_validate_reports_the_failing_path(config: Any) -> None:
    doc = json.loads(MsgConverter("deepstream-full", config, frame_interval=1).convert(_event())[0])
    doc["object"]["bbox"]["topleftx"] = 1.5
    with pytest.raises(PayloadValidationError, match=r"\$\['object'\]\['bbox'\]\['topleftx'\]"):
        validate(doc, "deepstream-full")
    with pytest.raises(PayloadValidationError, match="not JSON"):
        validate(b"{", "deepstream-minimal")
    with pytest.raises(PayloadValidationError, match="objects"):
        validate({"version": "4.0", "id": 1, "@timestamp": "2018-04-11T04:59:59.828Z", "sensorId": "s",
                  "objects": ["1|2|3|4|person"]}, "deepstream-minimal")
    with pytest.raises(ValueError, match="unknown payload schema"):
        validate({}, "kafka")  # type: ignore[arg-type]


def _classified() -> FrameEvent:
    return _event((ObjectEvent("car", 2, 0.8, (1.0, 2.0, 30.0, 40.0), None, 3,
                               (("color", "red", 0.75), ("make", "bmw", 0.5))),
                   ObjectEvent("person", 0, 0.9, (5.0, 5.0, 20.0, 60.0))))


@pytest.mark.parametrize("schema", SCHEMAS)
def test_classifications_validate_in_every_schema(schema: Any) -> None:
    for payload in MsgConverter(schema, frame_interval=1).convert(_classified()):
        validate(payload, schema)


def test_classifications_go_where_nvmsgconv_files_classifier_attributes() -> None:
    car, person = (json.loads(p) for p in MsgConverter("deepstream-full", frame_interval=1).convert(_classified()))
    assert car["object"]["car"] == {"confidence": 0.8, "color": "red", "make": "bmw"}
    assert person["object"]["person"] == {"confidence": 0.9}
    (frame,) = MsgConverter("inferstream-frame", frame_interval=1).convert(_classified())
    objects = json.loads(frame)["objects"]
    assert objects[0]["classifications"] == [{"type": "color", "label": "red", "confidence": 0.75},
                                             {"type": "make", "label": "bmw", "confidence": 0.5}]
    assert "classifications" not in objects[1]


def test_a_classifier_type_named_confidence_is_refused() -> None:
    event = _event((ObjectEvent("car", 2, 0.8, (1.0, 2.0, 30.0, 40.0), attributes=(("confidence", "x", 1.0),)),))
    with pytest.raises(ValueError, match="classifier-type 'confidence'"):
        MsgConverter("deepstream-full", frame_interval=1).convert(event)
