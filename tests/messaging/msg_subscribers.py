"""Test subscribers: what a consumer of each broker would see, as a list of payloads in arrival order."""
from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import confluent_kafka as ck
import paho.mqtt.client as mqtt
import pika
import redis
from paho.mqtt.enums import CallbackAPIVersion

if TYPE_CHECKING:
    from typing import Self  # 3.11; annotations are not evaluated at run time


class MqttSubscriber:
    """QoS-1 subscriber with a persistent session (clean_session=False): messages published while it is cut off
    (broker restart) are queued for it by the broker and delivered when it reconnects."""

    def __init__(self, port: int, topic: str) -> None:
        self.messages: list[bytes] = []
        self._cond = threading.Condition()
        self._subscribed = threading.Event()
        self._topic = topic
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"sub-{uuid.uuid4().hex[:10]}",
                                   clean_session=False)
        self._client.reconnect_delay_set(0.1, 0.5)
        self._client.on_connect = self._on_connect
        self._client.on_message = self._on_message
        self._client.on_subscribe = lambda *a: self._subscribed.set()
        self._client.connect("127.0.0.1", port, keepalive=5)
        self._client.loop_start()
        if not self._subscribed.wait(10):
            raise RuntimeError("MQTT subscriber could not subscribe")

    def _on_connect(self, client: mqtt.Client, *_: Any) -> None:
        client.subscribe(self._topic, qos=1)

    def _on_message(self, _c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        with self._cond:
            self.messages.append(msg.payload)
            self._cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float) -> list[bytes]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.messages) and time.monotonic() < deadline:
                self._cond.wait(0.1)
            return list(self.messages)

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


def redis_read_all(port: int, stream: str, payload_key: str = "metadata") -> list[bytes]:
    """Every entry of the stream, in stream order."""
    r = redis.Redis(host="127.0.0.1", port=port)
    try:
        return [fields[payload_key.encode()] for _id, fields in r.xrange(stream)]
    finally:
        r.close()


def amqp_read_all(port: int, queue: str, idle: float = 1.0) -> list[bytes]:
    """Consume the durable queue until it stays empty for ``idle`` seconds (acks each message)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    out: list[bytes] = []
    try:
        ch = conn.channel()
        last = time.monotonic()
        while time.monotonic() - last < idle:
            method, _props, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                time.sleep(0.05)
                continue
            out.append(body)
            last = time.monotonic()
    finally:
        conn.close()
    return out


def kafka_read_all(port: int, topic: str, idle: float = 1.0, timeout: float = 30.0) -> list[tuple[str | None, bytes]]:
    """Every ``(key, value)`` of every partition of ``topic``, from the first offset, read until nothing new came
    for ``idle`` seconds; partitions one after another, each in offset order. A plain consumer with the partitions
    assigned (no group: a group join takes seconds)."""
    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"read-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    out: dict[int, list[tuple[str | None, bytes]]] = {}
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        if meta.error is not None:
            raise RuntimeError(f"kafka topic {topic!r}: {meta.error}")
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in meta.partitions])
        last = start = time.monotonic()
        while time.monotonic() - last < idle and time.monotonic() - start < timeout:
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error() is not None:
                raise RuntimeError(f"kafka consumer: {msg.error()}")
            key, value, partition = msg.key(), msg.value(), msg.partition()
            assert value is not None and partition is not None
            out.setdefault(partition, []).append((None if key is None else bytes(key).decode(), value))
            last = time.monotonic()
    finally:
        consumer.close()
    return [m for p in sorted(out) for m in out[p]]


class PacedProducer:
    """Submits messages 0, 1, 2, ... at ``rate`` per second on a thread while the ``with`` block runs (the outage
    tests' load); ``sent`` is how many were submitted, final once the block is left. The thread always stops, even
    when the block fails (pytest would wait for it at exit)."""

    def __init__(self, submit: Callable[[int], bool], rate: float = 300.0) -> None:
        self.submit, self.rate, self.sent = submit, rate, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate)
            while self.sent < due:
                assert self.submit(self.sent)
                self.sent += 1
            time.sleep(0.005)
