"""pymsgbroker: sends the payloads pymsgconv attached to each buffer to a message broker — nvmsgbroker's job.

A thin shell (R6) around :class:`~inferstream.messaging.publisher.Publisher`: the streaming thread only reads the
``inferstream-payload`` metas and calls ``Publisher.submit`` (a bounded ``put_nowait``, R11); connecting, sending,
buffering (memory, then the disk spool), reconnecting and replaying happen on the publisher's worker thread, whose
warnings and errors become bus WARNING/ERROR messages (posting is thread-safe).

Lifecycle: ``start`` (READY -> PAUSED) parses ``conn-str`` (a malformed one is an error naming the accepted
formats) and connects once; an unreachable broker is a warning and messages are buffered until it appears, or an
error with ``fail-fast``. At EOS the element waits up to ``flush-timeout`` for delivery, posts the element message
``inferstream/msgbroker-flushed`` (``delivered``, ``pending``, ``spooled``, ``dropped``: guint64) and a WARNING
when anything is undelivered, then lets EOS through: it never hangs. ``stop`` closes the publisher (waiting up to
``flush-timeout`` only when no EOS flush ran); with a ``spool-dir``, what is still undelivered stays there and is
sent first by the next run. Each payload's message key is its stream id (Redis ``key`` field, AMQP message-id,
the Kafka record key).
"""
from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
from gi.repository import GObject, Gst, GstBase

from inferstream.elements import _props as props
from inferstream.elements._errors import post_error, post_warning
from inferstream.errors import ConfigError
from inferstream.messaging.brokers import BROKERS, redact_credentials
from inferstream.native.gstlog import gst_debug

if TYPE_CHECKING:
    from inferstream.messaging.brokers.base import Endpoint
    from inferstream.messaging.publisher import Publisher
    from inferstream.messaging.publisher_records import FlushReport, PublisherConfig, PublisherEvent

FLUSHED_MESSAGE = "inferstream/msgbroker-flushed"
DROP_POLICIES = ("drop-oldest", "drop-newest")
MIN_SEGMENT = 16 << 10


def _segment_bytes(spool_dir: str, limit: int) -> int:
    """Spool segment size: at most half the limit, 16 MiB, and 1/16 of the free space where the spool lives, so
    that drop-oldest on a full disk gives back a small part of the spool, not all of it."""
    where = Path(spool_dir).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = limit
    return max(MIN_SEGMENT, min(16 << 20, limit // 2, free // 16))


@dataclass(frozen=True, slots=True)
class _Settings:
    """Properties read once in do_start (R7)."""

    proto: str
    topic: str
    flush_timeout: float
    spool: bool


class PyMsgBroker(GstBase.BaseSink):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyMsgBroker"
    __gstmetadata__ = (
        "inferstream message broker",
        "Sink/Network",
        ("Publishes the JSON payloads pymsgconv attached to each buffer to MQTT, Redis Streams, AMQP, Kafka or a "
         "JSONL file, at least once: confirmed delivery, memory and disk spool while the broker is away, replay after "
         "reconnects and restarts. Does not sync to the clock by default"),
        "inferstream",
    )
    __gsttemplates__ = (Gst.PadTemplate.new("sink", Gst.PadDirection.SINK, Gst.PadPresence.ALWAYS,
                                            Gst.Caps.new_any()),)

    proto = props.choice("Protocol", "Broker protocol", tuple(BROKERS), "mqtt")
    conn_str = props.string("Connection string", "Broker address: 'host;port' (AMQP: 'host;port;username') or a "
                            "URL mqtt[s]://[user:pass@]host[:port], redis[s]://...[/db], amqp[s]://...[/vhost]; "
                            "Kafka: 'host;port' or 'host[:port][,host[:port]...]' (bootstrap brokers, no "
                            "credentials); proto=file: the JSONL file's path")
    topic = props.string("Topic", "MQTT topic / Redis stream / AMQP routing key (and queue name) / Kafka topic "
                         "(must exist or be auto-created by the broker); ignored by proto=file", "inferstream")
    config = props.string("Config", "Credentials file: a [message-broker] section with username / password (and "
                          "client-id, exchange, payloadkey, streamsize; Kafka: proto-cfg=\"k=v;k=v\" and any "
                          "librdkafka property, e.g. sasl.mechanism); overridden by INFERSTREAM_BROKER_USERNAME / "
                          "_PASSWORD and, for Kafka, INFERSTREAM_KAFKA_<PROPERTY> (dots as underscores)")
    spool_dir = props.string("Spool directory", "Directory of the disk spool for messages the broker has not "
                             "confirmed (kept across restarts, one element per directory); empty: memory only")
    memory_limit = props.integer("Memory limit", "Undelivered messages kept in memory; beyond this the oldest go "
                                 "to the spool (or drop-policy applies)", 10_000, 0, 10_000_000)
    # bytes need a gint64; _props has no int64 helper yet (same flags as props.integer)
    spool_limit = GObject.Property(type=GObject.TYPE_INT64, default=1 << 30, minimum=2 << 20, maximum=2**62,
                                   nick="Spool limit", blurb="Bytes the disk spool may hold (at least 2 MiB)",
                                   flags=props.READY_ONLY)
    drop_policy = props.choice("Drop policy", "What goes once memory and spool are full", DROP_POLICIES,
                               "drop-oldest")
    flush_timeout = props.number("Flush timeout", "Seconds EOS waits for outstanding deliveries", 10.0, 0.0, 3600.0)
    fail_fast = props.boolean("Fail fast", "A broker unreachable at start is an error; otherwise a warning, and "
                              "messages are buffered until it appears", False)
    ca_file = props.string("CA file", "PEM bundle to verify the broker with; setting it (or cert-file) switches "
                           "TLS on, as do mqtts:// rediss:// amqps:// URLs (Kafka: security.protocol=SSL)")
    cert_file = props.string("Certificate file", "Client certificate (PEM) for mutual TLS")
    key_file = props.string("Key file", "Private key (PEM) of the client certificate")

    @GObject.Property(type=str, nick="Statistics", flags=GObject.ParamFlags.READABLE,
                      blurb="Delivery counters as JSON: buffers, payloads, connected, accepted, delivered, pending, "
                      "in_memory, in_spool, spooled, dropped_queue_full, dropped_buffer_full, publish_errors, "
                      "reconnects")
    def stats(self) -> str:
        publisher = self._publisher
        counters = asdict(publisher.stats()) if publisher is not None else self._last_stats
        return json.dumps({"buffers": self._buffers, "payloads": self._payloads, **counters})

    def __init__(self) -> None:
        super().__init__()
        self.set_sync(False)  # messages go out as soon as they are made, not at the frame's clock time
        self.set_last_sample_enabled(False)  # holding the last video buffer could starve an upstream pool
        self._publisher: Publisher | None = None
        self._settings = _Settings("mqtt", "inferstream", 10.0, False)
        self._buffers = self._payloads = 0
        self._last_stats: dict[str, object] = {}
        self._flushed = False

    # lifecycle ----------------------------------------------------------------------------------------------
    def _config(self) -> PublisherConfig:
        from inferstream.messaging.publisher_records import PublisherConfig

        for name, choices in (("proto", tuple(BROKERS)), ("drop-policy", DROP_POLICIES)):
            if self.get_property(name) not in choices:
                raise ConfigError(f"{name}={self.get_property(name)!r}: expected one of {list(choices)}")
        if not self.conn_str:
            raise ConfigError("the conn-str property is not set")
        return PublisherConfig(memory_messages=self.memory_limit, spool_dir=self.spool_dir or None,
                               spool_max_bytes=self.spool_limit,
                               spool_segment_bytes=_segment_bytes(self.spool_dir, self.spool_limit)
                               if self.spool_dir else 16 << 20,
                               full_policy=self.drop_policy, fail_fast=self.fail_fast)

    def _endpoint(self) -> Endpoint:
        from inferstream.messaging.brokers import TlsOptions, parse_conn_str

        if self.proto == "file":
            from inferstream.messaging.brokers.file import file_endpoint

            return file_endpoint(self.conn_str)
        tls = TlsOptions(enabled=bool(self.ca_file or self.cert_file), ca_file=self.ca_file or None,
                         cert_file=self.cert_file or None, key_file=self.key_file or None)
        return parse_conn_str(self.proto, self.conn_str, tls=tls, credentials_file=self.config or None)

    def do_start(self) -> bool:
        from inferstream.messaging.brokers import create_client
        from inferstream.messaging.publisher import Publisher
        from inferstream.meta.payload import register_payload_meta

        self._buffers = self._payloads = 0
        self._flushed = False
        self._settings = _Settings(self.proto, self.topic, self.flush_timeout, bool(self.spool_dir))
        try:
            register_payload_meta()
            config = self._config()
            publisher = Publisher(create_client(self._endpoint()), config, self._on_event)
            publisher.start()  # connects once on this (the application's) thread, bounded by connect_timeout
        except Exception as exc:  # the C boundary (R8)
            if (redacted := redact_credentials(str(exc))) != str(exc):
                exc = ConfigError(redacted) if isinstance(exc, ConfigError) else RuntimeError(redacted)
            post_error(self, exc, f"cannot start the {self.proto} publisher for "
                       f"{redact_credentials(repr(self.conn_str))}")
            return False
        self._publisher = publisher
        return True

    def do_stop(self) -> bool:
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.close(0.0 if self._flushed else self._settings.flush_timeout)
            self._last_stats = asdict(publisher.stats())
        return True

    def _on_event(self, event: PublisherEvent) -> None:
        """Publisher worker (or start) thread -> bus; posting messages is thread-safe."""
        from inferstream.messaging.brokers import BrokerError

        text = f"{self._settings.proto} broker: {event.code}"
        if event.level == "error":
            post_error(self, BrokerError(event.text), text)
        elif event.level == "warning":
            post_warning(self, BrokerError(event.text), text)
        else:
            gst_debug(__name__, logging.INFO, f"{self.get_name()}: {text}: {event.text}")

    # streaming ----------------------------------------------------------------------------------------------
    def do_render(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        from inferstream.meta.payload import read_payloads

        publisher, topic = self._publisher, self._settings.topic
        if publisher is None:
            return Gst.FlowReturn.FLUSHING
        try:
            self._buffers += 1
            for meta in read_payloads(buf):
                for payload in meta.payloads:
                    publisher.submit(topic, payload, meta.stream_id or None)  # never blocks; drops are counted
                    self._payloads += 1
        except Exception as exc:  # the C boundary (R8)
            post_error(self, exc, "cannot read the payloads")
            return Gst.FlowReturn.ERROR
        return Gst.FlowReturn.OK

    def do_event(self, event: Gst.Event) -> bool:
        if event.type == Gst.EventType.EOS and self._publisher is not None:
            self._report(self._publisher.flush(self._settings.flush_timeout))
            self._flushed = True
        elif event.type == Gst.EventType.FLUSH_STOP:
            self._flushed = False
        return GstBase.BaseSink.do_event(self, event)  # the EOS message is posted here, after ours

    def _report(self, report: FlushReport) -> None:
        structure = Gst.Structure.new_empty(FLUSHED_MESSAGE)
        for name in ("delivered", "pending", "spooled", "dropped"):
            structure.set_value(name, GObject.Value(GObject.TYPE_UINT64, getattr(report, name)))
        self.post_message(Gst.Message.new_element(self, structure))
        if report.pending or report.dropped:
            from inferstream.messaging.brokers import BrokerError

            where = "kept in spool-dir for the next run" if self._settings.spool else "lost at stop: no spool-dir"
            post_warning(self, BrokerError(f"{report.pending} undelivered ({where}), {report.dropped} dropped, "
                                           f"{report.delivered} delivered"),
                         f"{self._settings.proto} broker: not everything was delivered within "
                         f"flush-timeout={self._settings.flush_timeout:g} s")


GObject.type_register(PyMsgBroker)
