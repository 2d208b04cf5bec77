"""What every broker client promises, and how a connection string becomes an :class:`Endpoint`.

Connection strings (``conn-str`` of pymsgbroker), per protocol:

* DeepStream style: ``host;port`` (``host;port;username`` for AMQP, as DeepStream's AMQP adapter takes it).
* URLs: ``mqtt://[user:pass@]host[:port]`` (``mqtts://`` = TLS), ``redis://[user:pass@]host[:port][/db]``
  (``rediss://``), ``amqp://[user:pass@]host[:port][/vhost]`` (``amqps://``).
* Kafka: ``host;port`` or a bootstrap list ``host[:port][,host[:port]...]`` (librdkafka's ``bootstrap.servers``;
  IPv6 as ``[::1]:9092``); TLS and SASL come from the TLS options, the credentials file and the environment
  (:mod:`~inferstream.messaging.brokers.kafka`).

Credentials, lowest to highest precedence: the conn-str's ``user:pass@``, a credentials file (DeepStream's
``cfg_*.txt`` style: a ``[message-broker]`` section with ``username``/``password``), then the environment variables
``INFERSTREAM_BROKER_USERNAME`` / ``INFERSTREAM_BROKER_PASSWORD``. Secrets therefore never need to sit in a pipeline
string.
"""
from __future__ import annotations

import configparser
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Protocol
from urllib.parse import unquote, urlsplit

from inferstream.errors import ConfigError, InferstreamError

ENV_USERNAME: Final = "INFERSTREAM_BROKER_USERNAME"
ENV_PASSWORD: Final = "INFERSTREAM_BROKER_PASSWORD"
# scheme://user:password@ (the user part never starts with "[": "mqtt://[user:pass@]host" is a format hint)
_URL_PASSWORD: Final = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@;'\"\[\]]*):[^\s'\"]*@")
# user:password@host without a scheme (Kafka's conn-str has none; its parser refuses userinfo, but quotes may not)
_BARE_PASSWORD: Final = re.compile(r"(?<![\w/:@\[.-])([A-Za-z0-9_.-]+):[^\s'\"@/:]+@(?=[\w\[])")


def redact_credentials(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it replaced by ``***``: pipeline
    lines, bus messages and errors that quote a conn-str end up in terminals and logs."""
    return _BARE_PASSWORD.sub(r"\1:***@", _URL_PASSWORD.sub(r"\1:***@", text))


class BrokerError(InferstreamError):
    """Delivery was not confirmed (connection lost, broker refused, timeout): the message must be retried.

    Attributes:
        confirmed: of the messages handed to the failing call, how many (from the first) were confirmed before it
            failed; the caller resends the rest.
    """

    def __init__(self, message: str, *, confirmed: int = 0) -> None:
        super().__init__(message)
        self.confirmed = confirmed


class BrokerUnavailableError(BrokerError):
    """The broker cannot be reached at all (connect failed)."""


class BrokerRejectedError(BrokerError):
    """The broker refused for good: authentication or authorisation failed, or it will never take these messages
    (e.g. a Redis key of another type). Retrying cannot help, so the Publisher reports an error and stops instead
    of backing off."""


class ConnStrError(ConfigError, ValueError):
    """A malformed connection string or an unknown protocol; the message names the expected format."""


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """TLS settings; ``enabled`` is also switched on by ``mqtts://``, ``rediss://`` and ``amqps://``.

    Attributes:
        enabled: use TLS.
        ca_file: PEM bundle to verify the broker with (system store when ``None``).
        cert_file, key_file: client certificate and key for mutual TLS.
        verify: check the broker's certificate and host name (switch off only for self-signed test brokers).
    """

    enabled: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect.

    Attributes:
        proto: ``mqtt``, ``redis``, ``amqp`` or ``kafka`` (a key of the broker table).
        host, port: the broker's address.
        database: Redis database number (``/db`` of the URL), else ``None``.
        vhost: AMQP virtual host, ``/`` by default.
        username, password: credentials after the precedence rules of the module docstring.
        tls: TLS settings.
        options: the credentials file's other ``[message-broker]`` keys (e.g. ``client-id``), lower-cased; not in
            the repr (a Kafka file may hold ``sasl.password``).
        servers: Kafka only: every bootstrap broker as ``host:port`` (``host``/``port`` are the first).
    """

    proto: str
    host: str
    port: int
    database: int | None = None
    vhost: str = "/"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: TlsOptions = TlsOptions()
    options: Mapping[str, str] = field(default_factory=dict, repr=False)
    servers: tuple[str, ...] = ()


class BrokerClient(Protocol):
    """One connection to one broker, used from one thread (the Publisher's worker).

    ``publish`` and ``publish_batch`` return only once the broker has taken responsibility for the messages
    (MQTT PUBACK, Redis XADD reply, AMQP publisher confirm); anything else raises :class:`BrokerError`, and the
    caller must assume the unconfirmed messages may or may not have arrived (at-least-once: resend them).
    """

    def connect(self, timeout: float) -> None:
        """Open the connection; raises BrokerUnavailableError when the broker cannot be reached."""
        ...

    def publish(self, topic: str, payload: bytes, key: str | None = None) -> None:
        """Send one message and wait for the broker's confirmation; raises BrokerError otherwise."""
        ...

    def publish_batch(self, messages: Sequence[tuple[str, bytes, str | None]]) -> int:
        """Send ``(topic, payload, key)`` messages in order and wait for their confirmations.

        Returns:
            How many messages, counted from the first, are confirmed; all of them unless it raises.

        Raises:
            BrokerError: confirmation missing for some message; ``exc.confirmed`` counts the confirmed prefix and
                the caller resends the rest (some of which may have arrived: at-least-once).
        """
        ...

    def close(self) -> None:
        """Close the connection; never raises."""
        ...


def _ds_style(proto: str, conn_str: str, default_port: int) -> tuple[str, int, str | None]:
    parts = [p.strip() for p in conn_str.split(";")]
    extra_ok = 3 if proto == "amqp" else 2
    if not 1 <= len(parts) <= extra_ok or not parts[0]:
        raise ValueError("wrong number of ';' fields")
    port = int(parts[1]) if len(parts) > 1 and parts[1] else default_port
    user = parts[2] if len(parts) > 2 and parts[2] else None
    return parts[0], port, user


def _kafka_servers(conn_str: str, default_port: int) -> tuple[str, ...]:
    """``host;port`` or ``host[:port][,host[:port]...]`` -> ``("host:port", ...)``."""
    if ";" in conn_str:
        host, port, _user = _ds_style("kafka", conn_str, default_port)
        return (f"{host}:{port}",)
    servers = []
    for item in conn_str.split(","):
        item = item.strip()
        if item.startswith("["):  # [v6]:port
            host, _, rest = item[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
            if rest and not rest.startswith(":"):
                raise ValueError(f"bad IPv6 address {item!r}")
        else:
            host, _, port_text = item.partition(":")
        if not host:
            raise ValueError(f"no host in {item!r}")
        port = int(port_text) if port_text else default_port
        if not 0 < port < 65536:
            raise ValueError(f"port {port} out of range")
        servers.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return tuple(servers)


def _formats(proto: str, schemes: Sequence[str]) -> str:
    if proto == "kafka":
        return "'host;port' or 'host[:port][,host[:port]...]' (TLS/SASL: config file or environment)"
    ds = "host;port;username" if proto == "amqp" else "host;port"
    tail = {"redis": "[/db]", "amqp": "[/vhost]"}.get(proto, "")
    return f"'{ds}' or '{schemes[0]}://[user:pass@]host[:port]{tail}' (TLS: '{schemes[1]}://...')"


def parse_conn_str(proto: str, conn_str: str, *, tls: TlsOptions | None = None,
                   credentials_file: str | Path | None = None,
                   environ: Mapping[str, str] | None = None) -> Endpoint:
    """Parse a pymsgbroker connection string.

    Args:
        proto: protocol name, a key of the broker table (``mqtt``, ``redis``, ``amqp``, ``kafka``).
        conn_str: see the module docstring for the accepted forms.
        tls: TLS settings; a TLS URL scheme switches ``enabled`` on.
        credentials_file: optional ``[message-broker]`` INI file with ``username``/``password`` (and other keys,
            kept in ``Endpoint.options``).
        environ: where to read the credential variables (``os.environ`` by default).

    Returns:
        The endpoint, credentials resolved.

    Raises:
        ConnStrError: unknown protocol, malformed string (the message shows the accepted formats), port out of
            range, a URL of another protocol, or an unreadable credentials file.
    """
    from inferstream.messaging.brokers import BROKERS  # the table lives with the registry

    spec = BROKERS.get(proto)
    if spec is None:
        raise ConnStrError(f"unknown broker protocol {proto!r}; known: {sorted(BROKERS)}")
    expected = _formats(proto, spec.schemes)
    tls = tls or TlsOptions()
    database: int | None = None
    vhost = "/"
    servers: tuple[str, ...] = ()
    if proto == "kafka" and "@" in conn_str:  # not quoted: the text before '@' may be a password
        raise ConnStrError(f"kafka conn-str: no credentials here (use the config file or {ENV_USERNAME} / "
                           f"{ENV_PASSWORD}); expected {expected}")
    try:
        if proto == "kafka":
            if "://" in conn_str:
                raise ValueError("no URL scheme in a Kafka conn-str")
            servers = _kafka_servers(conn_str, spec.default_port)
            host, _, port_text = servers[0].rpartition(":")
            host, port, user, password = host.strip("[]"), int(port_text), None, None
        elif "://" in conn_str:
            url = urlsplit(conn_str)
            if url.scheme not in spec.schemes:
                raise ValueError(f"scheme {url.scheme!r} is not one of {list(spec.schemes)}")
            if url.scheme == spec.schemes[1]:
                tls = replace(tls, enabled=True)
            if not url.hostname:
                raise ValueError("no host")
            host = url.hostname
            port = url.port or (spec.tls_port if tls.enabled else spec.default_port)
            user = unquote(url.username) if url.username else None
            password = unquote(url.password) if url.password else None
            path = url.path.lstrip("/")
            if proto == "redis" and path:
                database = int(path)
            elif proto == "amqp" and path:
                vhost = unquote(path)
            elif path or url.query:
                raise ValueError("unexpected path or query")
        else:
            host, port, user = _ds_style(proto, conn_str, spec.tls_port if tls.enabled else spec.default_port)
            password = None
        if not 0 < port < 65536:
            raise ValueError(f"port {port} out of range")
    except ValueError as exc:
        raise ConnStrError(f"{proto} conn-str {conn_str!r}: {exc}; expected {expected}") from None
    options: dict[str, str] = {}
    if credentials_file is not None:
        options = read_broker_config(credentials_file)
        user = options.pop("username", user)
        password = options.pop("password", password)
    env = os.environ if environ is None else environ
    user = env.get(ENV_USERNAME, user)
    password = env.get(ENV_PASSWORD, password)
    return Endpoint(proto, host, port, database, vhost, user, password, tls, options, servers)


def read_broker_config(path: str | Path) -> dict[str, str]:
    """Keys of the ``[message-broker]`` section of a DeepStream-style ``cfg_<proto>.txt`` file, lower-cased.

    Raises:
        ConnStrError: unreadable file, syntax error or no ``[message-broker]`` section.
    """
    ini = configparser.ConfigParser(interpolation=None)
    try:
        with open(path) as fh:
            ini.read_file(fh)
    except (OSError, configparser.Error) as exc:
        raise ConnStrError(f"broker config {path}: {exc}") from None
    if not ini.has_section("message-broker"):
        raise ConnStrError(f"broker config {path}: no [message-broker] section")
    return {k.lower(): v.strip().strip('"') for k, v in ini.items("message-broker")}
