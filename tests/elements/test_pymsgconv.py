"""pymsgconv in real pipelines: payloads per object / per frame from known injected detections (with tracking ids),
frame-interval and skip-empty, stream identity (pyinfer's stream-info, the property, the stream-start id), the
msgconv config, wall-clock time (reference timestamp meta or running time), the unique-id filter, and the errors."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import gi
import pytest
import torch

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from gst_helpers import inject, run_pipeline

from inferstream.detections import Detections
from inferstream.elements.pymsgconv import NTP_TO_UNIX_NS
from inferstream.messaging.schema import UNTRACKED_OBJECT_ID, validate
from inferstream.meta.gstanalytics import label_quarks, producer_quark, write_detections
from inferstream.meta.payload import PAYLOAD_META, PayloadMeta, read_payloads
from inferstream.meta.tracks import TrackRecord, write_tracks

SRC = "videotestsrc num-buffers={n} ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1"
BLOBS = "model=blobs:color_blob_detector model-family=yolo-end2end labels=red,green,blue"


def person_and_car(buf: Gst.Buffer, i: int, producers: tuple[int, int] = (1, 1)) -> None:
    """Frame i: a tracked person (id 7) at x1 = 10 + 2i, then an untracked car; each from its producer."""
    for box, label, producer in (([10.0 + 2 * i, 50.0, 50.0 + 2 * i, 130.0], "person", producers[0]),
                                 ([200.0, 120.0, 240.0, 200.0], "car", producers[1])):
        dets = Detections(boxes_xyxy=torch.tensor([box]), scores=torch.tensor([0.9 if label == "person" else 0.8]),
                          labels=torch.tensor([0]))
        (od_id,) = write_detections(buf, dets, label_quarks([label]), producer_quark(producer))
        if label == "person":
            write_tracks(buf, [TrackRecord(od_id, 7, 0, buf.pts, False)])


def _run(desc: str, probe: Any = read_payloads, **kw: Any) -> list[Any]:
    result = run_pipeline(desc, {"conv": probe}, timeout_s=60, **kw)
    assert not result.errors and result.eos, result.errors
    return result.seen["conv"]


def _docs(meta: PayloadMeta) -> list[dict[str, Any]]:
    return [json.loads(p) for p in meta.payloads]


def test_pymsgconv_deepstream_full_one_payload_per_object_with_track_ids() -> None:
    inject("pc_full", person_and_car)

    def both_readers(buf: Gst.Buffer) -> tuple[list[PayloadMeta], list[str]]:
        custom = buf.get_custom_meta(PAYLOAD_META)  # what a user's Python probe can do: read a copy
        return read_payloads(buf), list(custom.get_structure().get_value("payloads")) if custom else []

    seen = _run(SRC.format(n=10) + " ! testinject name=pc_full ! pymsgconv name=conv frame-interval=1 "
                "stream-id=cam1 ! fakesink", both_readers)
    assert len(seen) == 10
    for i, (metas, plain) in enumerate(seen):
        (meta,) = metas
        assert (meta.schema, meta.stream_id, meta.frame, len(meta.payloads)) == ("deepstream-full", "cam1", i, 2)
        assert [p.encode() for p in plain] == list(meta.payloads)
        person, car = _docs(meta)
        for doc in (person, car):
            validate(doc, "deepstream-full")
            assert doc["sensor"]["id"] == "cam1"
        assert person["object"]["id"] == "7" and person["object"]["person"] == {"confidence": pytest.approx(0.9)}
        assert person["object"]["bbox"] == {"topleftx": 10 + 2 * i, "toplefty": 50, "bottomrightx": 50 + 2 * i,
                                            "bottomrighty": 130}
        assert car["object"]["id"] == str(UNTRACKED_OBJECT_ID) and "car" in car["object"]


@pytest.mark.parametrize("skip_empty", [True, False])
def test_pymsgconv_frame_interval_and_skip_empty(skip_empty: bool) -> None:
    inject("pc_even", lambda buf, i: None if i % 2 else person_and_car(buf, i))  # odd frames: no meta at all
    seen = _run(SRC.format(n=30) + " ! testinject name=pc_even ! pymsgconv name=conv schema=inferstream-frame "
                f"frame-interval=3 skip-empty={str(skip_empty).lower()} ! fakesink")
    frames = [m.frame for metas in seen for m in metas]
    assert frames == [i for i in range(0, 30, 3) if i % 2 == 0 or not skip_empty]
    for metas in seen:
        for meta in metas:
            (doc,) = _docs(meta)
            validate(doc, "inferstream-frame")
            assert doc["frame"] == meta.frame and len(doc["objects"]) == (0 if meta.frame % 2 else 2)


def test_pymsgconv_stream_id_defaults_to_the_stream_start_id() -> None:
    inject("pc_sid", person_and_car)
    starts: list[str] = []

    def watch(pipeline: Gst.Pipeline) -> None:
        def on_event(_pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
            if info.get_event().type == Gst.EventType.STREAM_START:
                starts.append(info.get_event().parse_stream_start())
            return Gst.PadProbeReturn.OK

        pad = pipeline.get_by_name("conv").get_static_pad("sink")
        pad.add_probe(Gst.PadProbeType.EVENT_DOWNSTREAM, on_event)

    seen = _run(SRC.format(n=3) + " ! testinject name=pc_sid ! pymsgconv name=conv frame-interval=1 "
                "schema=deepstream-minimal ! fakesink", before_play=watch)
    assert len(starts) == 1 and starts[0]
    for i, (meta,) in enumerate(seen):
        (doc,) = _docs(meta)
        validate(doc, "deepstream-minimal")
        assert meta.stream_id == doc["sensorId"] == starts[0] and doc["id"] == i
        assert doc["objects"] == [f"7|{10 + 2 * i}|50|{50 + 2 * i}|130|person", f"{UNTRACKED_OBJECT_ID}|200|120|240|200|car"]


def test_pymsgconv_identity_from_pyinfer_and_sensor_from_config(tmp_path: Path) -> None:
    cfg = tmp_path / "msgconv.yml"
    cfg.write_text("sensor2: {enable: 1, id: gate-2, type: Camera, location: 1.5;2.5;3}\n"
                   "place2: {enable: 1, id: p2, name: lobby}\n")
    seen = _run("videotestsrc pattern=smpte num-buffers=2 ! video/x-raw,format=RGB,width=320,height=240 ! "
                f"pyinfer {BLOBS} stream-id=camA source-id=2 ! pymsgconv name=conv config={cfg} frame-interval=1 "
                "! fakesink")
    for (meta,) in seen:
        assert meta.stream_id == "camA"
        docs = _docs(meta)
        assert sorted(next(k for k in d["object"] if k in ("red", "green", "blue")) for d in docs) == \
            ["blue", "green", "red"]
        for doc in docs:
            validate(doc, "deepstream-full")
            assert doc["sensor"]["id"] == "gate-2" and doc["sensor"]["location"] == {"lat": 1.5, "lon": 2.5,
                                                                                      "alt": 3.0}
            assert doc["place"]["name"] == "lobby"


WALL_NS = 1_700_000_000_123_000_000  # 2023-11-14T22:13:20.123Z


@pytest.mark.parametrize("reference", ["timestamp/x-ntp, host=(string)cam, port=(int)554", "timestamp/x-unix",
                                       None])
def test_pymsgconv_wall_clock_time(reference: str | None) -> None:
    def stamp(buf: Gst.Buffer, i: int) -> None:
        person_and_car(buf, i)
        if reference is not None:
            offset = NTP_TO_UNIX_NS if reference.startswith("timestamp/x-ntp") else 0
            buf.add_reference_timestamp_meta(Gst.Caps.from_string(reference), WALL_NS + offset + i * 40_000_000,
                                             Gst.CLOCK_TIME_NONE)

    inject("pc_clock", stamp)
    before = time.time_ns()
    seen = _run(SRC.format(n=5) + " ! testinject name=pc_clock ! pymsgconv name=conv schema=inferstream-frame "
                "frame-interval=1 ! fakesink")
    docs = [_docs(meta)[0] for (meta,) in seen]
    if reference is not None:
        assert [d["ntp_ns"] for d in docs] == [WALL_NS + i * 40_000_000 for i in range(5)]
        assert docs[0]["@timestamp"] == "2023-11-14T22:13:20.123Z"
    else:  # running time + the wall clock at running time 0: media time anchored at start
        assert before <= docs[0]["ntp_ns"] <= time.time_ns()
        assert [d["ntp_ns"] - docs[0]["ntp_ns"] for d in docs] == [d["pts_ns"] for d in docs]


def test_pymsgconv_operate_on_unique_id_keeps_one_producer() -> None:
    inject("pc_uid", lambda buf, i: person_and_car(buf, i, producers=(1, 2)))
    seen = _run(SRC.format(n=3) + " ! testinject name=pc_uid ! pymsgconv name=conv schema=inferstream-object "
                "frame-interval=1 operate-on-unique-id=2 ! fakesink")
    assert [[d["object"]["label"] for d in _docs(m)] for (m,) in seen] == [["car"]] * 3


@pytest.mark.parametrize(("props", "message"), [
    ("config=/nonexistent/msgconv.yml", r"msgconv config /nonexistent/msgconv\.yml"),
    ("schema=nosuch", r"schema='nosuch': expected one of \['deepstream-full'"),
])
def test_pymsgconv_rejects_bad_settings_at_start(props: str, message: str) -> None:
    result = run_pipeline(SRC.format(n=1) + f" ! pymsgconv {props} ! fakesink", timeout_s=30)
    assert result.errors and re.search(message, result.errors[0]), result.errors


def test_pymsgconv_label_colliding_with_a_deepstream_field_is_a_stream_error() -> None:
    def bbox_label(buf: Gst.Buffer, _i: int) -> None:
        dets = Detections(boxes_xyxy=torch.tensor([[1.0, 2.0, 3.0, 4.0]]), scores=torch.tensor([0.5]),
                          labels=torch.tensor([0]))
        write_detections(buf, dets, label_quarks(["bbox"]))

    inject("pc_bad", bbox_label)
    result = run_pipeline(SRC.format(n=2) + " ! testinject name=pc_bad ! pymsgconv frame-interval=1 ! fakesink",
                          timeout_s=30)
    assert result.errors and "message conversion failed" in result.errors[0]
    assert "collides with a DeepStream object field" in result.errors[0]
