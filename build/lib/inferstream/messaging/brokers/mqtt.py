"""MQTT through paho-mqtt 2.x: QoS 1, a message counts as delivered when its PUBACK arrives.

paho's own reconnect is off (``reconnect_on_failure=False``): the Publisher decides when to reconnect and resends
what was not acknowledged, so a lost connection surfaces here as :class:`BrokerError`. A CONNACK refusing our
credentials (bad user name or password, not authorised, banned) is :class:`BrokerRejectedError`: retrying would
only repeat it.
"""
from __future__ import annotations

import contextlib
import ssl
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from inferstream.messaging.brokers.base import BrokerError, BrokerRejectedError, BrokerUnavailableError, Endpoint

_REFUSED = frozenset({134, 135, 138, 140})  # CONNACK reason codes (3.1.1's 4 and 5 arrive as 134 and 135)


class MqttClient:
    """QoS-1 MQTT publisher.

    Args:
        endpoint: from :func:`~.base.parse_conn_str`; ``options["client-id"]`` (DeepStream's cfg_mqtt.txt key) sets
            the client id.
        client_id: explicit client id (default: ``options["client-id"]`` or a random ``inferstream-...``).
        keepalive: seconds between PINGREQs; also bounds how fast a dead broker is noticed when idle.
        publish_timeout: seconds to wait for PUBACKs of one publish or batch.
        max_inflight: unacknowledged QoS-1 messages on the wire at once (pipelining depth of a batch).
        retain: publish with the retain flag.
    """

    def __init__(self, endpoint: Endpoint, *, client_id: str | None = None, keepalive: int = 10,
                 publish_timeout: float = 10.0, max_inflight: int = 100, retain: bool = False, **_: Any) -> None:
        self._ep = endpoint
        self._client_id = client_id or endpoint.options.get("client-id") or f"inferstream-{uuid.uuid4().hex[:12]}"
        self._keepalive = keepalive
        self._publish_timeout = publish_timeout
        self._max_inflight = max_inflight
        self._retain = retain
        self._client: mqtt.Client | None = None
        self._connected = threading.Event()
        self._lost = threading.Event()
        self._connack: str = ""
        self._refused = False

    def _on_connect(self, _c: mqtt.Client, _u: object, _f: object, reason: Any, _p: object) -> None:
        self._connack = str(reason)
        self._refused = getattr(reason, "value", None) in _REFUSED
        if not reason.is_failure:
            self._connected.set()
        else:
            self._lost.set()

    def _on_disconnect(self, _c: mqtt.Client, _u: object, _f: object, reason: Any, _p: object) -> None:
        self._connected.clear()
        self._lost.set()

    def connect(self, timeout: float) -> None:
        self.close()
        self._connected.clear()
        self._lost.clear()
        self._connack, self._refused = "", False
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self._client_id, clean_session=True,
                             reconnect_on_failure=False)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.max_inflight_messages_set(self._max_inflight)
        client.max_queued_messages_set(0)
        if self._ep.username is not None:
            client.username_pw_set(self._ep.username, self._ep.password)
        tls = self._ep.tls
        if tls.enabled:
            client.tls_set(ca_certs=tls.ca_file, certfile=tls.cert_file, keyfile=tls.key_file,
                           cert_reqs=ssl.CERT_REQUIRED if tls.verify else ssl.CERT_NONE)
            client.tls_insecure_set(not tls.verify)
        client.connect_timeout = timeout
        try:
            client.connect(self._ep.host, self._ep.port, keepalive=self._keepalive)
        except (OSError, ssl.SSLError) as exc:
            raise BrokerUnavailableError(f"mqtt {self._ep.host}:{self._ep.port}: {exc}") from exc
        self._client = client
        client.loop_start()
        deadline = time.monotonic() + timeout
        while not self._connected.wait(0.05):
            if self._lost.is_set() or time.monotonic() > deadline:
                self.close()
                why = f"CONNACK {self._connack}" if self._connack else "no CONNACK"
                if self._refused:
                    raise BrokerRejectedError(f"mqtt {self._ep.host}:{self._ep.port} refused us: {why} (check the "
                                              "username / password or the broker's ACL)")
                raise BrokerUnavailableError(f"mqtt {self._ep.host}:{self._ep.port}: {why}")

    def publish(self, topic: str, payload: bytes, key: str | None = None) -> None:
        self.publish_batch([(topic, payload, key)])

    def publish_batch(self, messages: Sequence[tuple[str, bytes, str | None]]) -> int:
        client = self._client
        if client is None or not self._connected.is_set():
            raise BrokerError("mqtt: not connected")
        infos = []
        for topic, payload, _key in messages:  # MQTT 3.1.1 has no message key
            info = client.publish(topic, payload, qos=1, retain=self._retain)
            if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_AGAIN):
                raise BrokerError(f"mqtt publish to {topic!r}: {mqtt.error_string(info.rc)}")
            infos.append(info)
        deadline = time.monotonic() + self._publish_timeout
        done = 0
        try:
            for done, info in enumerate(infos):
                while not info.is_published():
                    if self._lost.is_set():
                        raise BrokerError(f"mqtt: connection lost, {len(infos) - done} message(s) unacknowledged",
                                          confirmed=done)
                    if time.monotonic() > deadline:
                        raise BrokerError(f"mqtt: no PUBACK within {self._publish_timeout} s", confirmed=done)
                    info.wait_for_publish(0.05)  # returns on PUBACK or after 50 ms
        except (RuntimeError, ValueError) as exc:
            raise BrokerError(f"mqtt: {exc}", confirmed=done) from exc
        return len(infos)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        with contextlib.suppress(Exception):  # close never raises
            client.disconnect()
        with contextlib.suppress(Exception):
            client.loop_stop()
