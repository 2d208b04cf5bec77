"""End-to-end against real brokers: Publisher -> broker -> a subscriber started by the test.

Covers: every message arrives, in order; a broker outage (stop, wait, restart on the same port) loses nothing
and the duplicates it causes are counted; a spool written by a process killed with SIGKILL is delivered by the
next Publisher; fail-fast vs. buffering when the broker is absent at start.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from msg_servers import BINARIES, BrokerServer, ClosedMosquitto, PasswordRedis
from msg_subscribers import MqttSubscriber, PacedProducer, amqp_read_all, redis_read_all
from ports import free_port

from inferstream.messaging.brokers import (
    BrokerRejectedError,
    BrokerUnavailableError,
    create_client,
    parse_conn_str,
)
from inferstream.messaging.publisher import Publisher
from inferstream.messaging.publisher_records import PublisherConfig, PublisherEvent

PROTOCOLS = ["mqtt", "redis", "amqp"]


def _publisher(proto: str, port: int, spool: Path | None, events: list[PublisherEvent] | None = None,
               **cfg: object) -> Publisher:
    config = PublisherConfig(spool_dir=spool, backoff_initial=0.1, backoff_max=0.5, connect_timeout=2.0,
                             **cfg)  # type: ignore[arg-type]
    return Publisher.for_broker(proto, f"127.0.0.1;{port}", config,
                                on_event=None if events is None else events.append)


def _payload(seq: int) -> bytes:
    return json.dumps({"seq": seq, "pad": "x" * 200}).encode()


class _Reader:
    """Subscriber for MQTT (live, persistent session); for Redis/AMQP the stream/queue is read after the run."""

    def __init__(self, proto: str, server: BrokerServer, topic: str) -> None:
        self.proto, self.server, self.topic = proto, server, topic
        self.mqtt = MqttSubscriber(server.port, topic) if proto == "mqtt" else None

    def seqs(self, expect: int, timeout: float = 30.0) -> list[int]:
        if self.mqtt is not None:
            msgs = self.mqtt.wait_for(lambda m: len({json.loads(p)["seq"] for p in m}) >= expect, timeout)
            time.sleep(0.3)  # let redeliveries land too, so duplicates are counted
            msgs = list(self.mqtt.messages)
        elif self.proto == "redis":
            msgs = redis_read_all(self.server.port, self.topic)
        else:
            msgs = amqp_read_all(self.server.port, self.topic)
        return [json.loads(p)["seq"] for p in msgs]

    def close(self) -> None:
        if self.mqtt is not None:
            self.mqtt.close()


def _check_at_least_once(seqs: list[int], n: int) -> int:
    """All of 0..n-1 present, first occurrences in order; returns the number of duplicates."""
    assert set(seqs) == set(range(n)), f"missing: {sorted(set(range(n)) - set(seqs))[:20]}"
    first: list[int] = []
    seen: set[int] = set()
    for s in seqs:
        if s not in seen:
            seen.add(s)
            first.append(s)
    assert first == sorted(first), "first deliveries out of order"
    return len(seqs) - n


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_publisher_delivers_all_in_order(proto: str, server_for: Callable[[str], BrokerServer],
                                         tmp_path: Path) -> None:
    server = server_for(proto)
    topic = f"inferstream-{proto}-{uuid.uuid4().hex[:8]}"
    reader = _Reader(proto, server, topic)
    pub = _publisher(proto, server.port, tmp_path / "spool")
    pub.start()
    n = 1000
    for i in range(n):
        assert pub.submit(topic, _payload(i))
    report = pub.flush(30)
    assert (report.delivered, report.pending, report.dropped) == (n, 0, 0)
    pub.close()
    seqs = reader.seqs(n)
    reader.close()
    assert seqs == list(range(n))


# (protocol, seconds the broker is down at least): AMQP's outage is the >= 10 s one (its restart takes 5-10 s)
OUTAGES = [("mqtt", 3.0), ("redis", 3.0), ("amqp", 10.0)]


@pytest.mark.parametrize(("proto", "outage_s"), OUTAGES)
def test_publisher_survives_broker_outage(proto: str, outage_s: float, fresh_server: Callable[[str], BrokerServer],
                                          tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    server = fresh_server(proto)
    server.start()
    topic = f"outage-{proto}-{uuid.uuid4().hex[:8]}"
    reader = _Reader(proto, server, topic)
    events: list[PublisherEvent] = []
    # a small memory bound so that the outage really goes through the disk spool
    pub = _publisher(proto, server.port, tmp_path / "spool", events, memory_messages=200, batch_size=64)
    pub.start()
    with PacedProducer(lambda i: pub.submit(topic, _payload(i))) as producer:
        time.sleep(1.0)
        server.stop()
        down_at = time.monotonic()
        time.sleep(outage_s)  # the broker's boot comes on top (a RabbitMQ boot takes 2-10 s)
        server.start()  # same port, same data directory
        down_s = time.monotonic() - down_at
        spooled_during = pub.stats().spooled
        time.sleep(1.0)
    sent = producer.sent
    report = pub.flush(60)
    stats = pub.stats()
    pub.close()
    seqs = reader.seqs(sent, timeout=30)
    reader.close()
    dups = _check_at_least_once(seqs, sent)
    summary = {"proto": proto, "outage_s": round(down_s, 1), "messages": sent, "received": len(seqs),
               "duplicates": dups, "spooled": spooled_during, "reconnects": stats.reconnects,
               "publish_errors": stats.publish_errors}
    record_property("outage", summary)
    print(f"\nOUTAGE {json.dumps(summary)}")
    assert down_s >= outage_s
    assert report.pending == 0 and report.dropped == 0 and report.delivered == sent
    assert spooled_during > 0, "the outage should have pushed messages to the disk spool"
    assert stats.reconnects >= 1
    assert any(e.code == "disconnected" for e in events)


_CHILD = Path(__file__).parent / "spool_child.py"


def test_spool_survives_kill_9(fresh_server: Callable[[str], BrokerServer], tmp_path: Path) -> None:
    server = fresh_server("redis")  # not started: the child spools everything
    spool, topic, n = tmp_path / "spool", f"kill9-{uuid.uuid4().hex[:8]}", 3000
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(_CHILD), "redis", f"127.0.0.1;{server.port}", str(spool), topic,
                              str(n)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == f"SPOOLED {n}", line
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert list(spool.glob("*.seg")), "nothing on disk after the kill"
    server.start()
    events: list[PublisherEvent] = []
    pub = _publisher("redis", server.port, spool, events)
    assert pub.stats().recovered == n
    pub.start()
    report = pub.flush(30)
    pub.close()
    assert (report.delivered, report.pending) == (n, 0)
    assert any(e.code == "spool-recovered" for e in events)
    assert redis_read_all(server.port, topic) == [_payload(i) for i in range(n)]
    assert not list(spool.glob("*.seg")), "confirmed segments must be deleted"


@pytest.mark.parametrize("proto", [*PROTOCOLS, "kafka"])
def test_publisher_fail_fast_raises_when_broker_absent(proto: str, tmp_path: Path) -> None:
    pub = _publisher(proto, free_port(), tmp_path / "spool", fail_fast=True)
    with pytest.raises(BrokerUnavailableError, match="fail-fast"):
        pub.start()


def test_publisher_buffers_when_broker_absent_at_start(fresh_server: Callable[[str], BrokerServer],
                                                        tmp_path: Path) -> None:
    server = fresh_server("mqtt")
    topic = f"late-{uuid.uuid4().hex[:8]}"
    events: list[PublisherEvent] = []
    pub = _publisher("mqtt", server.port, tmp_path / "spool", events)
    pub.start()  # broker absent: warning, no exception
    assert any(e.code == "connect-failed" and e.level == "warning" for e in events)
    for i in range(100):
        pub.submit(topic, _payload(i))
    assert pub.flush(0.5).pending == 100
    server.start()
    reader = _Reader("mqtt", server, topic)  # persistent session + retained in order after reconnect
    report = pub.flush(20)
    pub.close()
    assert (report.delivered, report.pending) == (100, 0)
    seqs = reader.seqs(100)
    reader.close()
    # messages sent before the subscriber existed are not retained by MQTT: check what it saw is ordered
    assert seqs == sorted(seqs)


@pytest.mark.parametrize("confirm", ["tx", "confirms"])
def test_amqp_client_confirm_modes(confirm: str, server_for: Callable[[str], BrokerServer]) -> None:
    server = server_for("amqp")
    topic = f"amqp-{confirm}-{uuid.uuid4().hex[:8]}"
    client = create_client(parse_conn_str("amqp", server.conn_str), confirm=confirm)
    client.connect(5)
    assert client.publish_batch([(topic, _payload(i), None) for i in range(50)]) == 50
    client.publish(topic, _payload(50), key="k-50")
    client.close()
    assert [json.loads(p)["seq"] for p in amqp_read_all(server.port, topic, idle=0.3)] == list(range(51))


@pytest.mark.parametrize("confirm", ["tx", "confirms"])
def test_amqp_client_unroutable_is_an_error(confirm: str, server_for: Callable[[str], BrokerServer]) -> None:
    from inferstream.messaging.brokers import BrokerError

    server = server_for("amqp")
    client = create_client(parse_conn_str("amqp", server.conn_str), declare_queue=False, confirm=confirm)
    client.connect(5)
    with pytest.raises(BrokerError, match="unroutable|refused") as info:
        client.publish_batch([("nobody-listens", _payload(0), None)])
    assert info.value.confirmed == 0
    client.close()


def test_amqp_client_rejects_unknown_confirm_mode() -> None:
    with pytest.raises(ValueError, match="confirm must be 'tx' or 'confirms'"):
        create_client(parse_conn_str("amqp", "127.0.0.1;1"), confirm="maybe")


@pytest.mark.parametrize("proto", PROTOCOLS)
def test_refused_credentials_are_rejected_at_start_not_retried(proto: str, tmp_path: Path,
                                                               server_for: Callable[[str], BrokerServer]) -> None:
    """mosquitto without anonymous access, redis with requirepass, RabbitMQ with a wrong password: start() raises
    BrokerRejectedError although fail_fast is off (retrying cannot fix a password)."""
    if proto == "amqp":
        server, conn = server_for("amqp"), f"amqp://guest:wrong-pw@127.0.0.1:{server_for('amqp').port}"
    else:
        if BINARIES[proto] is None:
            pytest.skip(f"{proto} server not installed")
        server = (ClosedMosquitto if proto == "mqtt" else PasswordRedis)(tmp_path / proto)
        server.start()
        conn = f"{proto}://someone:wrong-pw@127.0.0.1:{server.port}"
    events: list[PublisherEvent] = []
    pub = Publisher.for_broker(proto, conn, PublisherConfig(spool_dir=tmp_path / "spool", connect_timeout=5.0),
                               on_event=events.append)
    try:
        with pytest.raises(BrokerRejectedError, match="refused us") as info:
            pub.start()
    finally:
        if proto != "amqp":
            server.close()
    assert "wrong-pw" not in str(info.value)
    assert not any(e.code == "connect-failed" for e in events)  # no "retrying with backoff"


def test_publisher_stops_with_an_error_when_the_broker_rejects_messages(tmp_path: Path,
                                                                      server_for: Callable[[str], BrokerServer]
                                                                      ) -> None:
    """Redis answers WRONGTYPE (the stream key holds a string): permanent, so an error at once and the worker
    stops, keeping the messages in the spool, instead of resending them forever."""
    import redis

    server = server_for("redis")
    topic = f"wrongtype-{uuid.uuid4().hex[:8]}"
    redis.Redis(port=server.port).set(topic, "not a stream")
    events: list[PublisherEvent] = []
    pub = _publisher("redis", server.port, tmp_path / "spool", events)
    pub.start()
    for i in range(10):
        pub.submit(topic, _payload(i))
    deadline = time.monotonic() + 10
    while not any(e.code == "rejected" for e in events) and time.monotonic() < deadline:
        time.sleep(0.02)
    report = pub.close(1.0)
    rejected = [e for e in events if e.code == "rejected"]
    assert len(rejected) == 1 and rejected[0].level == "error" and "WRONGTYPE" in rejected[0].text
    assert not any(e.code in ("disconnected", "connected") for e in events)  # no resend-and-reconnect loop
    assert (report.delivered, report.pending, report.spooled) == (0, 10, 10)  # kept for a later run
