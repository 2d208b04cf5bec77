"""Kafka against a real Kafka-protocol broker (Tansu, started by the test), read back by a confluent-kafka consumer.

Tansu keeps topics in memory, so a broker restart empties it. The outage test therefore cuts the publisher off
first (it reaches the broker through ``tansu proxy``, which is stopped), reads everything the broker confirmed
with a consumer, and only then restarts the broker: every message id must then be found before or after the
restart, and a loss could only be the publisher's; each key's first deliveries must keep their order. Duplicates are
counted and bounded by one batch (the batch in flight when the link was cut).
"""
from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from msg_servers import BrokerServer, TansuProxy
from msg_subscribers import PacedProducer, kafka_read_all

from inferstream.messaging.brokers import BrokerError, create_client, parse_conn_str
from inferstream.messaging.publisher import Publisher
from inferstream.messaging.publisher_records import PublisherConfig, PublisherEvent

BATCH = 64


def _payload(seq: int) -> bytes:
    return json.dumps({"seq": seq, "cam": f"cam{seq % 4}", "pad": "x" * 200}).encode()


def _publisher(conn_str: str, spool: Path, events: list[PublisherEvent]) -> Publisher:
    config = PublisherConfig(spool_dir=spool, backoff_initial=0.1, backoff_max=0.5, connect_timeout=2.0,
                             memory_messages=200, batch_size=BATCH)
    return Publisher.for_broker("kafka", conn_str, config, on_event=events.append)


def test_kafka_publisher_delivers_each_key_in_order(server_for: Callable[[str], BrokerServer],
                                                    tmp_path: Path) -> None:
    server = server_for("kafka")
    topic = f"keys-{uuid.uuid4().hex[:8]}"
    pub = _publisher(server.conn_str, tmp_path / "spool", [])
    pub.start()
    n = 1000
    for i in range(n):
        assert pub.submit(topic, _payload(i), f"cam{i % 4}")
    report = pub.flush(30)
    pub.close()
    assert (report.delivered, report.pending, report.dropped) == (n, 0, 0)
    got = kafka_read_all(server.port, topic)
    assert len(got) == n and all(json.loads(v)["cam"] == k for k, v in got)
    for cam in range(4):  # one key, one partition: that camera's order is kept
        assert [json.loads(v)["seq"] for k, v in got if k == f"cam{cam}"] == list(range(cam, n, 4))


@pytest.fixture
def proxied_kafka(fresh_server: Callable[[str], BrokerServer], tmp_path: Path) -> Iterator[TansuProxy]:
    """A fresh Tansu broker (``.origin``) behind a ``tansu proxy``; both running."""
    broker = fresh_server("kafka")
    broker.start()
    proxy = TansuProxy(tmp_path / "proxy", broker)
    try:
        proxy.start()
        yield proxy
    finally:
        proxy.close()


def test_kafka_publisher_survives_broker_restart(proxied_kafka: TansuProxy, tmp_path: Path,
                                                 record_property: Callable[[str, object], None]) -> None:
    proxy, broker = proxied_kafka, proxied_kafka.origin
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    events: list[PublisherEvent] = []
    pub = _publisher(proxy.conn_str, tmp_path / "spool", events)
    pub.start()
    with PacedProducer(lambda i: pub.submit(topic, _payload(i), f"cam{i % 4}")) as producer:
        time.sleep(1.0)
        proxy.stop()  # the publisher's link is cut mid-run
        down_at = time.monotonic()
        before = kafka_read_all(broker.port, topic)  # all the broker confirmed before its restart
        broker.stop()
        time.sleep(max(0.0, 3.0 - (time.monotonic() - down_at)))
        broker.start()  # same port, empty (memory storage)
        proxy.start()
        down_s = time.monotonic() - down_at
        spooled_during = pub.stats().spooled
        time.sleep(1.0)
    sent = producer.sent
    report = pub.flush(60)
    stats = pub.stats()
    pub.close()
    after = kafka_read_all(broker.port, topic)
    counts = Counter(json.loads(v)["seq"] for _k, v in before + after)
    missing = sorted(set(range(sent)) - set(counts))
    dups = sum(counts.values()) - len(counts)
    summary = {"outage_s": round(down_s, 1), "messages": sent, "before_restart": len(before),
               "after_restart": len(after), "duplicates": dups, "spooled": spooled_during,
               "reconnects": stats.reconnects, "publish_errors": stats.publish_errors}
    record_property("outage", summary)
    print(f"\nOUTAGE kafka {json.dumps(summary)}")
    assert not missing, f"missing: {missing[:20]}"
    assert set(counts) == set(range(sent))
    assert dups <= BATCH, "more duplicates than the one batch in flight when the link was cut"
    assert all(json.loads(v)["cam"] == k for k, v in before + after)
    for cam in range(4):  # each key's first deliveries keep the order it was submitted in
        firsts = list(dict.fromkeys(json.loads(v)["seq"] for k, v in before + after if k == f"cam{cam}"))
        assert firsts == sorted(firsts), f"cam{cam} out of order"
    assert before and after, "the run should span the restart"
    assert report.pending == 0 and report.dropped == 0 and report.delivered == sent
    assert spooled_during > 0, "the outage should have pushed messages to the disk spool"
    assert stats.reconnects >= 1 and any(e.code == "disconnected" for e in events)


def test_kafka_client_confirms_only_what_the_broker_reported(server_for: Callable[[str], BrokerServer]) -> None:
    """A batch whose third message librdkafka refuses (over message.max.bytes): the two before it are confirmed
    by their delivery reports, the error names the cause, and the broker holds exactly those two."""
    server = server_for("kafka")
    topic = f"refused-{uuid.uuid4().hex[:8]}"
    client = create_client(parse_conn_str("kafka", server.conn_str))
    client.connect(5)
    with pytest.raises(BrokerError, match="too large") as info:
        client.publish_batch([(topic, _payload(0), "cam0"), (topic, _payload(1), "cam0"),
                              (topic, b"x" * (2 << 20), "cam0"), (topic, _payload(3), "cam0")])
    client.close()
    assert info.value.confirmed == 2
    assert [json.loads(v)["seq"] for _k, v in kafka_read_all(server.port, topic, idle=0.5)] == [0, 1]
