"""pymsgbroker end to end: a fixed clip with known detections -> pymsgconv -> pymsgbroker -> a real broker (the
fixtures of tests/messaging) -> a subscriber. Exactly one message per frame (or per object), in order, each valid
against its JSON Schema; a broker that is down at start (warning, then delivery once it is up, before the EOS flush
gives up); an EOS that cannot flush (reported, does not hang); malformed conn-str and fail-fast errors; AMQP once;
Kafka (Tansu) with the stream id as every message's key."""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gi
import pytest
from msg_servers import BrokerServer
from msg_subscribers import MqttSubscriber, amqp_read_all, kafka_read_all, redis_read_all
from ports import free_port

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from gst_helpers import RunResult, inject, run_pipeline
from test_pymsgconv import person_and_car

from inferstream.elements.pymsgbroker import FLUSHED_MESSAGE
from inferstream.messaging.schema import validate

FRAMES = 30
SRC = f"videotestsrc num-buffers={FRAMES} ! video/x-raw,format=RGB,width=320,height=240,framerate=30/1"


def _run(name: str, conv: str, broker: str, on_broker: Callable[[Gst.Element], None] | None = None,
         **kw: Any) -> tuple[RunResult, dict[str, Any]]:
    """Play the clip with person_and_car injected; returns the result and the broker's final ``stats``.
    ``on_broker`` gets the pymsgbroker element before the pipeline plays."""
    inject(name, person_and_car)
    elements: dict[str, Gst.Element] = {}

    def before_play(pipeline: Gst.Pipeline) -> None:
        elements["broker"] = pipeline.get_by_name("broker")
        if on_broker is not None:
            on_broker(elements["broker"])

    result = run_pipeline(f"{SRC} ! testinject name={name} ! pymsgconv frame-interval=1 stream-id=cam1 {conv} ! "
                          f"pymsgbroker name=broker {broker}", timeout_s=60, before_play=before_play, **kw)
    return result, json.loads(elements["broker"].get_property("stats"))


def _flushed(result: RunResult) -> dict[str, int]:
    (s,) = [s for s in result.elements if s.get_name() == FLUSHED_MESSAGE]
    return {k: s.get_value(k) for k in ("delivered", "pending", "spooled", "dropped")}


def _check_frames(payloads: list[bytes], schema: str) -> None:
    """Per-frame schemas: frame i's message is the i-th; per-object: person then car of frame i at 2i, 2i+1."""
    docs = [json.loads(p) for p in payloads]
    for doc in docs:
        validate(doc, schema)  # type: ignore[arg-type]
    if schema == "inferstream-frame":
        assert [d["frame"] for d in docs] == list(range(FRAMES))
        assert all(d["stream_id"] == "cam1" and len(d["objects"]) == 2 for d in docs)
    elif schema == "deepstream-minimal":
        assert [d["id"] for d in docs] == list(range(FRAMES))
    else:  # deepstream-full: the person's x1 is 10 + 2 * frame
        assert len(docs) == 2 * FRAMES
        assert [d["object"]["bbox"]["topleftx"] for d in docs[::2]] == [10 + 2 * i for i in range(FRAMES)]
        assert all("person" in d["object"] for d in docs[::2]) and all("car" in d["object"] for d in docs[1::2])


def _read(proto: str, target: BrokerServer | Path, topic: str, sub: MqttSubscriber | None, n: int) -> list[bytes]:
    if sub is not None:
        sub.wait_for(lambda m: len(m) >= n, 20)
        return sub.wait_for(lambda m: len(m) > n, 0.3)  # a moment longer: duplicates would show up
    if proto == "redis":
        assert isinstance(target, BrokerServer)
        return redis_read_all(target.port, topic)
    assert isinstance(target, Path)
    return target.read_bytes().splitlines()


@pytest.mark.parametrize(("proto", "schema", "per_frame"), [("mqtt", "deepstream-full", 2),
                                                             ("redis", "inferstream-frame", 1),
                                                             ("file", "deepstream-minimal", 1)])
def test_pymsgbroker_delivers_one_message_per_frame_or_object_in_order(
        proto: str, schema: str, per_frame: int, server_for: Callable[[str], BrokerServer], tmp_path: Path) -> None:
    topic = f"t-{proto}-{tmp_path.name}"
    target: BrokerServer | Path = tmp_path / "out" / "events.jsonl" if proto == "file" else server_for(proto)
    conn = str(target) if isinstance(target, Path) else target.conn_str
    sub = MqttSubscriber(target.port, topic) if proto == "mqtt" and isinstance(target, BrokerServer) else None
    try:
        result, stats = _run(f"b_{proto}", f"schema={schema}", f"proto={proto} conn-str={conn} topic={topic}")
        got = _read(proto, target, topic, sub, per_frame * FRAMES)
    finally:
        if sub is not None:
            sub.close()
    assert not result.errors and not result.warnings and result.eos, result.errors + result.warnings
    assert len(got) == per_frame * FRAMES
    _check_frames(got, schema)
    n = per_frame * FRAMES
    assert _flushed(result) == {"delivered": n, "pending": 0, "spooled": 0, "dropped": 0}
    assert (stats["buffers"], stats["payloads"], stats["delivered"], stats["pending"]) == (FRAMES, n, n, 0)


def _stored(proto: str, server: BrokerServer, topic: str) -> list[bytes]:
    """What the broker holds for ``topic``, oldest first (Kafka: one key, so one partition, in offset order)."""
    if proto == "kafka":
        return [value for _key, value in kafka_read_all(server.port, topic)]
    return redis_read_all(server.port, topic)


@pytest.mark.parametrize("proto", ["redis", "kafka"])
def test_pymsgbroker_broker_down_at_start_warns_then_delivers_from_the_spool(
        proto: str, fresh_server: Callable[[str], BrokerServer], tmp_path: Path) -> None:
    server = fresh_server(proto)  # port chosen, not started yet

    def start_at_eos(broker: Gst.Element) -> None:
        """Starts the broker once every frame's message is in the spool (the broker is down, memory-limit=0); the
        EOS flush then waits (flush-timeout) while the publisher reconnects with backoff."""
        def probe(_pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
            if info.get_event().type == Gst.EventType.EOS and server.proc is None:
                deadline = time.monotonic() + 10
                while json.loads(broker.get_property("stats"))["in_spool"] < FRAMES and time.monotonic() < deadline:
                    time.sleep(0.01)
                server.start()
            return Gst.PadProbeReturn.OK

        broker.get_static_pad("sink").add_probe(Gst.PadProbeType.EVENT_DOWNSTREAM, probe)

    result, stats = _run(f"b_down_{proto}", "schema=inferstream-frame",
                         f"proto={proto} conn-str={server.conn_str} topic=late spool-dir={tmp_path / 'spool'} "
                         "memory-limit=0 flush-timeout=20", on_broker=start_at_eos)
    assert not result.errors and result.eos
    assert result.warnings and f"{proto} broker: connect-failed" in result.warnings[0], result.warnings
    assert _flushed(result) == {"delivered": FRAMES, "pending": 0, "spooled": 0, "dropped": 0}
    assert stats["spooled"] == FRAMES and stats["reconnects"] == 1  # went through the disk spool
    _check_frames(_stored(proto, server, "late"), "inferstream-frame")


def test_pymsgbroker_eos_reports_what_it_could_not_deliver_and_does_not_hang() -> None:
    result, stats = _run("b_never", "schema=inferstream-frame",
                         f"proto=redis conn-str=127.0.0.1;{free_port()} flush-timeout=0.3")
    assert not result.errors and result.eos
    assert _flushed(result) == {"delivered": 0, "pending": FRAMES, "spooled": 0, "dropped": 0}
    assert any("not everything was delivered within flush-timeout=0.3 s" in w and f"{FRAMES} undelivered" in w
               for w in result.warnings), result.warnings
    assert stats["connected"] is False and stats["accepted"] == FRAMES


def test_pymsgbroker_undelivered_messages_wait_in_the_spool_for_the_next_run(
        server_for: Callable[[str], BrokerServer], tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    first, _ = _run("b_spool1", "schema=inferstream-frame", f"proto=redis conn-str=127.0.0.1;{free_port()} "
                    f"topic=carry spool-dir={spool} flush-timeout=0.2")
    assert _flushed(first)["pending"] == FRAMES
    assert any("kept in spool-dir for the next run" in w for w in first.warnings), first.warnings
    server = server_for("redis")
    second, stats = _run("b_spool2", "schema=inferstream-frame", f"proto=redis conn-str={server.conn_str} "
                         f"topic=carry spool-dir={spool}")
    assert not second.errors and _flushed(second)["delivered"] == 2 * FRAMES and stats["recovered"] == FRAMES
    frames = [json.loads(p)["frame"] for p in redis_read_all(server.port, "carry")]
    assert frames == list(range(FRAMES)) * 2  # the first run's frames first, then the second's


@pytest.mark.parametrize(("proto", "conn", "expected"), [
    ("mqtt", "127.0.0.1;notaport", "expected 'host;port' or 'mqtt://[user:pass@]host[:port]'"),
    ("redis", "http://127.0.0.1:6379", "expected 'host;port' or 'redis://[user:pass@]host[:port][/db]'"),
    ("amqp", "h;1;u;extra", "expected 'host;port;username' or 'amqp://[user:pass@]host[:port][/vhost]'"),
    ("file", "file://otherhost/x.jsonl", "expected 'PATH' (e.g. 'events.jsonl') or 'file:///ABSOLUTE/PATH'"),
    ("mqtt", "mqtt://user:s3cret@host:notaport", "mqtt://user:***@host:notaport"),
    ("kafka", "kafka://h:9092", "expected 'host;port' or 'host[:port][,host[:port]...]'"),
    ("kafka", "a:9092,b:notaport", "kafka conn-str 'a:9092,b:notaport': invalid literal"),
    ("kafka", "user:s3cret@h:9092", "kafka conn-str: no credentials here"),
])
def test_pymsgbroker_malformed_conn_str_is_an_error_naming_the_format(proto: str, conn: str, expected: str) -> None:
    result = run_pipeline(f"videotestsrc num-buffers=1 ! pymsgbroker proto={proto} conn-str=\"{conn}\"",
                          timeout_s=30)
    assert result.errors and "cannot start the" in result.errors[0] and expected in result.errors[0], result.errors
    assert "s3cret" not in result.errors[0]  # passwords never reach the bus


@pytest.mark.parametrize(("props", "message"), [
    ("proto=zmq conn-str=h;1", r"proto='zmq': expected one of \['mqtt', 'redis', 'amqp', 'kafka', 'file'\]"),
    ("proto=mqtt", "the conn-str property is not set"),
    ("proto=redis conn-str=127.0.0.1;{port} fail-fast=true", r"broker unreachable at start \(fail-fast\)"),
])
def test_pymsgbroker_rejects_bad_settings_at_start(props: str, message: str) -> None:
    result = run_pipeline(f"videotestsrc num-buffers=1 ! pymsgbroker {props.format(port=free_port())}", timeout_s=30)
    assert result.errors and re.search(message, result.errors[0]), result.errors


def test_pymsgbroker_amqp_delivers_every_frame_in_order(amqp_server: BrokerServer) -> None:
    result, _ = _run("b_amqp", "schema=inferstream-frame",
                     f"proto=amqp conn-str=amqp://guest:guest@127.0.0.1:{amqp_server.port}/ topic=frames")
    assert not result.errors and not result.warnings and result.eos, result.errors + result.warnings
    assert _flushed(result)["delivered"] == FRAMES
    _check_frames(amqp_read_all(amqp_server.port, "frames", idle=0.5), "inferstream-frame")


def test_pymsgbroker_kafka_keys_every_message_with_its_stream_id(kafka_server: BrokerServer) -> None:
    result, stats = _run("b_kafka", "schema=deepstream-full",
                         f"proto=kafka conn-str={kafka_server.conn_str} topic=objects")
    assert not result.errors and not result.warnings and result.eos, result.errors + result.warnings
    assert _flushed(result) == {"delivered": 2 * FRAMES, "pending": 0, "spooled": 0, "dropped": 0}
    got = kafka_read_all(kafka_server.port, "objects")
    assert [key for key, _value in got] == ["cam1"] * (2 * FRAMES)
    _check_frames([value for _key, value in got], "deepstream-full")
    assert stats["delivered"] == 2 * FRAMES


@pytest.mark.parametrize(("cfg", "message"), [
    ('proto-cfg = "no.such.property=1"', "kafka producer settings: No such configuration property"),
    ("acks = 1", r"\['acks'\] are set by inferstream"),
    ("security.protocol = SASL_PLAINTEXT\nsasl.mechanism = NOPE", "Unsupported SASL mechanism: NOPE"),
])
def test_pymsgbroker_kafka_bad_client_settings_are_an_error(cfg: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "cfg_kafka.txt"
    path.write_text(f"[message-broker]\nsasl.password = s3cret\n{cfg}\n")
    result = run_pipeline(f"videotestsrc num-buffers=1 ! pymsgbroker proto=kafka conn-str=127.0.0.1;{free_port()} "
                          f"config={path}", timeout_s=30)
    assert result.errors and re.search(message, result.errors[0]), result.errors
    assert "s3cret" not in result.errors[0]
