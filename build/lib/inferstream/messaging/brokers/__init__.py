"""Broker clients behind one Protocol, found through one table.

Adding a broker is one file (a class that satisfies :class:`~.base.BrokerClient` and takes ``(endpoint, **options)``)
plus one line in :data:`BROKERS`. Client modules are imported only when used, so a missing optional package
(paho-mqtt, redis, pika, confluent-kafka) matters only for the protocol that needs it.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Final

from inferstream.messaging.brokers.base import (
    BrokerClient,
    BrokerError,
    BrokerRejectedError,
    BrokerUnavailableError,
    ConnStrError,
    Endpoint,
    TlsOptions,
    parse_conn_str,
    redact_credentials,
)


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """``target`` is ``"module:Class"``; ``schemes`` are the plain and the TLS URL scheme."""

    target: str
    schemes: tuple[str, str]
    default_port: int
    tls_port: int


BROKERS: Final[dict[str, BrokerSpec]] = {
    "mqtt": BrokerSpec("inferstream.messaging.brokers.mqtt:MqttClient", ("mqtt", "mqtts"), 1883, 8883),
    "redis": BrokerSpec("inferstream.messaging.brokers.redis_streams:RedisStreamsClient", ("redis", "rediss"),
                        6379, 6379),
    "amqp": BrokerSpec("inferstream.messaging.brokers.amqp:AmqpClient", ("amqp", "amqps"), 5672, 5671),
    "kafka": BrokerSpec("inferstream.messaging.brokers.kafka:KafkaClient", ("kafka", "kafka"), 9092, 9092),
    "file": BrokerSpec("inferstream.messaging.brokers.file:JsonlFileClient", ("file", "file"), 0, 0),
}


def create_client(endpoint: Endpoint, **options: Any) -> BrokerClient:
    """A new, unconnected client for ``endpoint.proto``; ``options`` go to the client's constructor.

    Raises:
        ConnStrError: unknown protocol.
        ImportError: the protocol's Python package is missing (install the ``brokers`` extra).
    """
    spec = BROKERS.get(endpoint.proto)
    if spec is None:
        raise ConnStrError(f"unknown broker protocol {endpoint.proto!r}; known: {sorted(BROKERS)}")
    module, _, cls = spec.target.partition(":")
    client: BrokerClient = getattr(importlib.import_module(module), cls)(endpoint, **options)
    return client


__all__ = ["BROKERS", "BrokerClient", "BrokerError", "BrokerRejectedError", "BrokerSpec", "BrokerUnavailableError",
           "ConnStrError", "Endpoint", "TlsOptions", "create_client", "parse_conn_str", "redact_credentials"]
