"""AMQP 0-9-1 (RabbitMQ) through pika: persistent messages, broker-confirmed, durable exchange and queue.

Two ways to learn that the broker has the messages, both the AMQP guarantees RabbitMQ documents for "not lost":

* ``confirm="tx"`` (default): the channel is transactional and each batch ends with ``tx.commit``; RabbitMQ
  answers ``commit-ok`` once every message of the batch is routed and, for persistent messages in durable
  queues, written to disk. One round trip per batch.
* ``confirm="confirms"``: publisher confirms (``confirm.select``): a message counts as delivered when its
  ``basic.ack`` arrives. pika's BlockingChannel waits for each ack before the next publish, so this costs one
  round trip (and one broker disk sync) per message: 10-20x slower here (bench/results/messaging.md).

Messages go to
``exchange`` with the topic as routing key, like DeepStream's AMQP adapter (default exchange ``amq.topic``). With
``declare_queue`` (default) a durable queue named after each topic is declared and bound on first use, so that
messages survive a broker restart even before any consumer exists; ``mandatory`` publishing turns "nobody would
receive this" into an error instead of a silent loss. Refused credentials or access (RabbitMQ's ACCESS_REFUSED,
NOT_ALLOWED) are :class:`~.base.BrokerRejectedError`: retrying would only repeat them.
"""
from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Sequence
from typing import Any, Literal

import pika  # type: ignore[import-untyped]  # pika ships no type information
import pika.exceptions as pex  # type: ignore[import-untyped]

from inferstream.messaging.brokers.base import BrokerError, BrokerRejectedError, BrokerUnavailableError, Endpoint

# pika logs every failed connection attempt at ERROR; the Publisher reports those itself. Without this handler
# Python's last-resort handler would print them to stderr of an application that configured no logging.
logging.getLogger("pika").addHandler(logging.NullHandler())

_REFUSED_CODES = (403, 530)  # ACCESS_REFUSED, NOT_ALLOWED (e.g. no access to the vhost)


def _refused(exc: BaseException) -> bool:
    if isinstance(exc, (pex.ProbableAuthenticationError, pex.AuthenticationError, pex.ProbableAccessDeniedError)):
        return True
    return isinstance(exc, (pex.ConnectionClosedByBroker, pex.ChannelClosedByBroker)) and \
        exc.reply_code in _REFUSED_CODES


_PERSISTENT = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent, content_type="application/json")


class AmqpClient:
    """Confirmed AMQP publisher.

    Args:
        endpoint: from :func:`~.base.parse_conn_str`; ``options["exchange"]`` (DeepStream's cfg_amqp.txt key)
            sets the default exchange.
        exchange: exchange to publish to; declared durable unless it is a predefined ``amq.*`` one.
        exchange_type: type used when declaring ``exchange``.
        declare_queue: declare a durable queue per topic (queue name = topic) bound with routing key = topic.
        heartbeat: AMQP heartbeat in seconds (how fast a silent broker death is noticed).
        confirm: ``"tx"`` or ``"confirms"``, see the module docstring.
    """

    def __init__(self, endpoint: Endpoint, *, exchange: str | None = None, exchange_type: str = "topic",
                 declare_queue: bool = True, heartbeat: int = 10, confirm: Literal["tx", "confirms"] = "tx",
                 **_: Any) -> None:
        if confirm not in ("tx", "confirms"):
            raise ValueError(f"confirm must be 'tx' or 'confirms', got {confirm!r}")
        self._confirm = confirm
        self._returned: list[bytes] = []
        self._ep = endpoint
        self._exchange = exchange or endpoint.options.get("exchange", "amq.topic")
        self._exchange_type = exchange_type
        self._declare_queue = declare_queue
        self._heartbeat = heartbeat
        self._conn: pika.BlockingConnection | None = None
        self._channel: Any = None
        self._declared: set[str] = set()

    def _params(self, timeout: float) -> pika.ConnectionParameters:
        creds = pika.PlainCredentials(self._ep.username or "guest", self._ep.password or "guest")
        ssl_options = None
        if self._ep.tls.enabled:
            ctx = ssl.create_default_context(cafile=self._ep.tls.ca_file)
            if self._ep.tls.cert_file:
                ctx.load_cert_chain(self._ep.tls.cert_file, self._ep.tls.key_file)
            if not self._ep.tls.verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            ssl_options = pika.SSLOptions(ctx, self._ep.host)
        return pika.ConnectionParameters(
            host=self._ep.host, port=self._ep.port, virtual_host=self._ep.vhost, credentials=creds,
            heartbeat=self._heartbeat, blocked_connection_timeout=timeout, socket_timeout=timeout,
            stack_timeout=timeout, connection_attempts=1, ssl_options=ssl_options)

    def connect(self, timeout: float) -> None:
        self.close()
        try:
            conn = pika.BlockingConnection(self._params(timeout))
        except (pex.AMQPError, OSError) as exc:
            raise self._connect_error(exc) from exc
        try:
            channel = conn.channel()
            if self._confirm == "tx":
                channel.tx_select()
                channel.add_on_return_callback(lambda _ch, _m, _p, body: self._returned.append(body))
            else:
                channel.confirm_delivery()
            if not self._exchange.startswith("amq.") and self._exchange:
                channel.exchange_declare(self._exchange, exchange_type=self._exchange_type, durable=True)
        except (pex.AMQPError, OSError) as exc:
            with contextlib.suppress(Exception):
                conn.close()
            raise self._connect_error(exc) from exc
        self._conn, self._channel = conn, channel
        self._declared.clear()

    def _connect_error(self, exc: BaseException) -> BrokerError:
        where = f"amqp {self._ep.host}:{self._ep.port}"
        if _refused(exc):
            return BrokerRejectedError(f"{where} refused us: {exc!r} (check the username / password and the "
                                       "user's permissions on the vhost)")
        return BrokerUnavailableError(f"{where}: {exc!r}")

    def _declare(self, topic: str) -> None:
        if self._declare_queue and topic not in self._declared:
            self._channel.queue_declare(topic, durable=True)
            if self._exchange:
                self._channel.queue_bind(topic, self._exchange, routing_key=topic)
            self._declared.add(topic)

    def publish(self, topic: str, payload: bytes, key: str | None = None) -> None:
        self.publish_batch([(topic, payload, key)])

    def publish_batch(self, messages: Sequence[tuple[str, bytes, str | None]]) -> int:
        if self._channel is None:
            raise BrokerError("amqp: not connected")
        done = 0
        self._returned.clear()
        try:
            for topic, payload, key in messages:
                self._declare(topic)
                props = _PERSISTENT if key is None else pika.BasicProperties(
                    delivery_mode=pika.DeliveryMode.Persistent, content_type="application/json", message_id=key)
                self._channel.basic_publish(self._exchange, topic, payload, props, mandatory=True)
                if self._confirm == "confirms":  # basic_publish returned after the broker's ack
                    done += 1
            if self._confirm == "tx":
                self._channel.tx_commit()
                assert self._conn is not None
                self._conn.process_data_events(0)  # deliver basic.return frames that came before commit-ok
                if self._returned:
                    first = next(i for i, m in enumerate(messages) if m[1] in self._returned)
                    raise BrokerError(f"amqp: message for {messages[first][0]!r} was unroutable (no bound queue)",
                                      confirmed=first)
                done = len(messages)
        except (pex.UnroutableError, pex.NackError) as exc:
            raise BrokerError(f"amqp: broker refused message for {messages[done][0]!r}: {exc!r}",
                              confirmed=done) from exc
        except (pex.AMQPError, OSError) as exc:
            self.close()
            kind = BrokerRejectedError if _refused(exc) else BrokerError
            raise kind(f"amqp: {exc!r}", confirmed=done) from exc
        return done

    def close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):  # close never raises
                conn.close()
