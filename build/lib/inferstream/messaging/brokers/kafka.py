"""Kafka through confluent-kafka (librdkafka): an idempotent producer with ``acks=all``; a message counts as
delivered when its delivery report arrives without error, never before.

Each ``publish_batch`` hands every message to librdkafka, then serves delivery reports until all are in, the
batch's ``publish_timeout`` passes (librdkafka's ``message.timeout.ms`` is set to it), or librdkafka reports that
every broker is down or a fatal error: then :class:`BrokerError` carries the confirmed prefix and the Publisher
resends the rest with a new producer (``connect`` makes one and checks the cluster answers a metadata request).
The message key is the stream id; the ``murmur2_random`` partitioner puts a key on the partition Java clients
would choose, so one camera's events keep their order. Topics must exist or the broker must create them on first
use (Kafka's ``auto.create.topics.enable``, Tansu's default).

librdkafka properties, lowest to highest precedence (later ones win):

1. derived: TLS options (ca-file / cert-file / key-file) -> ``security.protocol=SSL`` and ``ssl.*.location``;
   a username (credentials file or ``INFERSTREAM_BROKER_USERNAME`` / ``_PASSWORD``) -> ``SASL_PLAINTEXT`` (or
   ``SASL_SSL`` with TLS), ``sasl.mechanism=PLAIN``, ``sasl.username`` / ``sasl.password``;
2. the credentials file's ``[message-broker]`` section: ``proto-cfg = "k=v;k=v"`` (DeepStream's cfg_kafka.txt
   key), then every other key as a librdkafka property (``sasl.mechanism = SCRAM-SHA-512``) except
   ``client-id`` (-> ``client.id``) and DeepStream's ``share-connection`` / ``consumer-group-id`` (ignored); an
   unknown property is an error at start;
3. the environment: ``INFERSTREAM_KAFKA_<PROPERTY>``, the property upper-cased with dots as underscores
   (``INFERSTREAM_KAFKA_SASL_PASSWORD`` -> ``sasl.password``).

The keys the delivery guarantee rests on (``acks``, ``enable.idempotence``, ``bootstrap.servers``,
``message.timeout.ms``) are refused from files and the environment. Values are never put in messages.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import confluent_kafka as ck

from inferstream.errors import ConfigError
from inferstream.messaging.brokers.base import BrokerError, BrokerUnavailableError, Endpoint

ENV_PREFIX: Final = "INFERSTREAM_KAFKA_"
_OWNED: Final = frozenset({"acks", "enable.idempotence", "bootstrap.servers", "message.timeout.ms"})
# [message-broker] keys that are not librdkafka properties (the last two: DeepStream's, meaningless here)
_FILE_KEYS: Final = frozenset({"proto-cfg", "client-id", "share-connection", "consumer-group-id"})
_LOST: Final = frozenset({ck.KafkaError._ALL_BROKERS_DOWN, ck.KafkaError._FATAL})
# librdkafka's own log lines (every failed connect) go here instead of stderr; the Publisher reports outages itself
_LOG = logging.getLogger("inferstream.kafka")
_LOG.addHandler(logging.NullHandler())
_PENDING: Final = object()


def _parse_proto_cfg(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"kafka proto-cfg: {key.strip()!r} is not 'property=value'")
        out[key.strip()] = value.strip()
    return out


def librdkafka_config(endpoint: Endpoint, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """librdkafka properties for ``endpoint`` after the precedence rules of the module docstring.

    Raises:
        ConfigError: a malformed ``proto-cfg``, or a file/environment key the delivery guarantee owns.
    """
    conf: dict[str, str] = {}
    tls = endpoint.tls
    if tls.enabled:
        conf["security.protocol"] = "SSL"
        for key, value in (("ssl.ca.location", tls.ca_file), ("ssl.certificate.location", tls.cert_file),
                           ("ssl.key.location", tls.key_file)):
            if value:
                conf[key] = value
        if not tls.verify:
            conf["enable.ssl.certificate.verification"] = "false"
    if endpoint.username is not None:
        conf |= {"security.protocol": "SASL_SSL" if tls.enabled else "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                 "sasl.username": endpoint.username}
        if endpoint.password is not None:
            conf["sasl.password"] = endpoint.password
    given = _parse_proto_cfg(endpoint.options.get("proto-cfg", ""))
    given |= {k: v for k, v in endpoint.options.items() if k not in _FILE_KEYS}
    env = os.environ if environ is None else environ
    given |= {k[len(ENV_PREFIX):].lower().replace("_", "."): v for k, v in env.items() if k.startswith(ENV_PREFIX)}
    if owned := sorted(_OWNED & given.keys()):
        raise ConfigError(f"kafka: {owned} are set by inferstream (acks=all, idempotence, conn-str, "
                          "publish timeout) and cannot be overridden")
    return conf | given


class KafkaClient:
    """Idempotent, ``acks=all`` Kafka producer.

    Args:
        endpoint: from :func:`~.base.parse_conn_str` (``endpoint.servers`` is the bootstrap list).
        publish_timeout: seconds to wait for the delivery reports of one batch (also librdkafka's
            ``message.timeout.ms``).
        environ: where to read ``INFERSTREAM_KAFKA_*`` (``os.environ`` by default).
    """

    def __init__(self, endpoint: Endpoint, *, publish_timeout: float = 10.0,
                 environ: Mapping[str, str] | None = None, **_: Any) -> None:
        self._ep = endpoint
        self._where = ",".join(endpoint.servers) or f"{endpoint.host}:{endpoint.port}"
        self._publish_timeout = publish_timeout
        self._conf: dict[str, Any] = {
            **librdkafka_config(endpoint, environ), "bootstrap.servers": self._where, "acks": "all",
            "enable.idempotence": True, "message.timeout.ms": int(publish_timeout * 1000),
            "partitioner": "murmur2_random", "error_cb": self._on_error, "logger": _LOG}
        self._conf.setdefault("client.id", endpoint.options.get("client-id", "inferstream"))
        self._producer: ck.Producer | None = None
        self._lost: ck.KafkaError | None = None

    def _on_error(self, err: ck.KafkaError) -> None:
        """librdkafka's error callback (served by poll / flush on the publishing thread)."""
        if err.fatal() or err.code() in _LOST:
            self._lost = err

    def connect(self, timeout: float) -> None:
        self.close()
        self._lost = None
        try:
            producer = ck.Producer(self._conf)
        except ck.KafkaException as exc:  # bad property name or value: retrying would not help
            raise ConfigError(f"kafka producer settings: {exc.args[0].str()}") from None
        deadline = time.monotonic() + timeout
        while True:  # short metadata requests, so that "all brokers down" (connection refused) fails at once
            try:
                producer.list_topics(timeout=max(0.01, min(0.05, deadline - time.monotonic())))
                break
            except ck.KafkaException as exc:
                producer.poll(0)  # serves error_cb
                if self._lost is not None or time.monotonic() >= deadline:
                    _destroy(producer)
                    why = self._lost.str() if self._lost is not None else exc.args[0].str()
                    raise BrokerUnavailableError(f"kafka {self._where}: {why}") from exc
        producer.poll(0)  # "brokers down" reports queued while the broker was still starting: stale now
        self._lost = None
        self._producer = producer

    def publish(self, topic: str, payload: bytes, key: str | None = None) -> None:
        self.publish_batch([(topic, payload, key)])

    def publish_batch(self, messages: Sequence[tuple[str, bytes, str | None]]) -> int:
        producer = self._producer
        if producer is None:
            raise BrokerError("kafka: not connected")
        results: list[object] = [_PENDING] * len(messages)
        deadline = time.monotonic() + self._publish_timeout
        for i, (topic, payload, key) in enumerate(messages):
            try:
                while True:
                    try:
                        producer.produce(topic, payload, key, on_delivery=_reporter(results, i))
                        break
                    except BufferError:  # librdkafka's local queue is full: serve reports, then retry
                        self._serve(producer, results, deadline)
            except ck.KafkaException as exc:  # refused locally (too large, bad topic name): the rest is not sent
                results[i:] = [exc.args[0]] * (len(messages) - i)
                break
        while _unreported(results):
            self._serve(producer, results, deadline)
        done = _prefix(results)
        if done < len(messages):
            err = results[done]
            why = err.str() if isinstance(err, ck.KafkaError) else err
            raise BrokerError(f"kafka delivery to {messages[done][0]!r} failed: {why}", confirmed=done)
        return done

    def _serve(self, producer: ck.Producer, results: list[object], deadline: float) -> None:
        """Serve delivery reports for up to 50 ms; raises when the brokers are gone or the deadline passed."""
        producer.flush(0.05)  # unlike poll, flush sends at once instead of waiting out linger.ms
        if self._lost is not None and _unreported(results):
            raise BrokerError(f"kafka {self._where}: {self._lost.str()}; "
                              f"{_unreported(results)} message(s) unconfirmed", confirmed=_prefix(results))
        if time.monotonic() > deadline and _unreported(results):
            raise BrokerError(f"kafka: no delivery report within {self._publish_timeout} s",
                              confirmed=_prefix(results))

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            _destroy(producer)


def _reporter(results: list[object], i: int) -> Any:
    """Delivery-report callback that stores message ``i``'s outcome (``None`` = delivered)."""
    def on_delivery(err: ck.KafkaError | None, _msg: ck.Message) -> None:
        results[i] = err
    return on_delivery


def _unreported(results: list[object]) -> int:
    """Messages without a delivery report yet (by identity: KafkaError's ``==`` fails on other types)."""
    return sum(r is _PENDING for r in results)


def _prefix(results: list[object]) -> int:
    """How many results, from the first, are confirmed deliveries (``None`` = no error)."""
    for i, r in enumerate(results):
        if r is not None:
            return i
    return len(results)


def _destroy(producer: ck.Producer) -> None:
    """Drop what librdkafka still holds (the Publisher resends it) and serve the purge reports; never raises."""
    with contextlib.suppress(Exception):
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.flush(0)
