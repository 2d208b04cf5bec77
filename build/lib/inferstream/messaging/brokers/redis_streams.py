"""Redis Streams through redis-py: one ``XADD`` per message, pipelined per batch; the reply is the confirmation.

Stream entries carry the payload under ``payload_key`` (``metadata`` by default, DeepStream's redis adapter's
``payloadkey``) and the message key, when given, under ``key``. ``maxlen`` (DeepStream's ``streamsize``) caps the
stream with approximate trimming (``MAXLEN ~``). Durability across a Redis restart is the server's business
(``appendonly yes``).

A wrong password, a missing ACL permission (``NOPERM``) or a key of another type (``WRONGTYPE``) is
:class:`~.base.BrokerRejectedError`: no retry can fix it.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from inferstream.messaging.brokers.base import BrokerError, BrokerRejectedError, BrokerUnavailableError, Endpoint

_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
_REFUSALS = (redis.exceptions.AuthenticationError, redis.exceptions.AuthenticationWrongNumberOfArgsError,
             redis.exceptions.NoPermissionError)


def _permanent(exc: BaseException) -> bool:
    """A refusal that retrying cannot change (credentials, ACL, the stream key holding another type)."""
    return isinstance(exc, _REFUSALS) or str(exc).startswith("WRONGTYPE")


class RedisStreamsClient:
    """XADD publisher.

    Args:
        endpoint: from :func:`~.base.parse_conn_str`; ``options`` keys ``payloadkey`` and ``streamsize`` (from a
            DeepStream cfg_redis.txt) set the defaults of ``payload_key`` and ``maxlen``.
        payload_key: stream field that holds the payload.
        maxlen: approximate maximum stream length, ``None`` for unbounded.
        socket_timeout: seconds to wait for replies.
    """

    def __init__(self, endpoint: Endpoint, *, payload_key: str | None = None, maxlen: int | None = None,
                 socket_timeout: float = 10.0, **_: Any) -> None:
        self._ep = endpoint
        self._payload_key = payload_key or endpoint.options.get("payloadkey", "metadata")
        size = maxlen if maxlen is not None else endpoint.options.get("streamsize")
        self._maxlen = int(size) if size else None
        self._socket_timeout = socket_timeout
        self._redis: redis.Redis | None = None

    def connect(self, timeout: float) -> None:
        self.close()
        tls = self._ep.tls
        try:
            client = redis.Redis(
                host=self._ep.host, port=self._ep.port, db=self._ep.database or 0, username=self._ep.username,
                password=self._ep.password, socket_timeout=self._socket_timeout, socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0), single_connection_client=True, ssl=tls.enabled,
                ssl_ca_certs=tls.ca_file, ssl_certfile=tls.cert_file, ssl_keyfile=tls.key_file,
                ssl_cert_reqs="required" if tls.verify else "none", ssl_check_hostname=tls.verify)
        except (*_ERRORS, redis.exceptions.ResponseError) as exc:  # single-connection clients connect here
            raise self._connect_error(exc) from exc
        try:
            client.ping()
        except (*_ERRORS, redis.exceptions.ResponseError) as exc:
            client.close()
            raise self._connect_error(exc) from exc
        self._redis = client

    def _connect_error(self, exc: BaseException) -> BrokerError:
        where = f"redis {self._ep.host}:{self._ep.port}"
        if _permanent(exc):
            return BrokerRejectedError(f"{where} refused us: {exc} (check the username / password or ACL)")
        return BrokerUnavailableError(f"{where}: {exc}")

    def publish(self, topic: str, payload: bytes, key: str | None = None) -> None:
        self.publish_batch([(topic, payload, key)])

    def publish_batch(self, messages: Sequence[tuple[str, bytes, str | None]]) -> int:
        client = self._redis
        if client is None:
            raise BrokerError("redis: not connected")
        pipe = client.pipeline(transaction=False)
        for topic, payload, key in messages:
            fields: dict[str, bytes | str] = {self._payload_key: payload}
            if key is not None:
                fields["key"] = key
            pipe.xadd(topic, fields, maxlen=self._maxlen, approximate=True)  # type: ignore[arg-type]
        try:
            replies = pipe.execute(raise_on_error=False)
        except _ERRORS as exc:
            raise BrokerError(f"redis: {exc}") from exc
        for i, reply in enumerate(replies):
            if isinstance(reply, Exception):
                kind = BrokerRejectedError if _permanent(reply) else BrokerError
                raise kind(f"redis XADD {messages[i][0]!r}: {reply}", confirmed=i)
        return len(replies)

    def close(self) -> None:
        client, self._redis = self._redis, None
        if client is not None:
            with contextlib.suppress(Exception):  # close never raises
                client.close()
