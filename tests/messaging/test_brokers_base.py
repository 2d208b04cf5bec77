"""Connection strings, credentials precedence and the broker table."""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from inferstream.messaging.brokers import BROKERS, ConnStrError, Endpoint, TlsOptions, create_client, parse_conn_str

NO_ENV: dict[str, str] = {}


@pytest.mark.parametrize(("proto", "conn_str", "expected", "raises"), [
    ("mqtt", "localhost;1883", Endpoint("mqtt", "localhost", 1883), nullcontext()),
    ("mqtt", "broker", Endpoint("mqtt", "broker", 1883), nullcontext()),
    ("mqtt", "mqtt://u:p%40ss@10.0.0.1:1884", Endpoint("mqtt", "10.0.0.1", 1884, username="u", password="p@ss"),
     nullcontext()),
    ("mqtt", "mqtts://h", Endpoint("mqtt", "h", 8883, tls=TlsOptions(enabled=True)), nullcontext()),
    ("redis", "127.0.0.1;6380", Endpoint("redis", "127.0.0.1", 6380), nullcontext()),
    ("redis", "redis://h:1/3", Endpoint("redis", "h", 1, database=3), nullcontext()),
    ("redis", "rediss://h", Endpoint("redis", "h", 6379, tls=TlsOptions(enabled=True)), nullcontext()),
    ("amqp", "h;5672;guest", Endpoint("amqp", "h", 5672, username="guest"), nullcontext()),
    ("amqp", "amqp://a:b@h/prod", Endpoint("amqp", "h", 5672, vhost="prod", username="a", password="b"),
     nullcontext()),
    ("amqp", "amqps://h", Endpoint("amqp", "h", 5671, tls=TlsOptions(enabled=True)), nullcontext()),
    ("mqtt", "h;1883;x", None, pytest.raises(ConnStrError, match=r"expected 'host;port' or 'mqtt://")),
    ("mqtt", ";1883", None, pytest.raises(ConnStrError, match="wrong number of ';' fields")),
    ("mqtt", "h;port", None, pytest.raises(ConnStrError, match=r"mqtt conn-str 'h;port': invalid literal")),
    ("mqtt", "h;70000", None, pytest.raises(ConnStrError, match="port 70000 out of range")),
    ("mqtt", "redis://h:1", None, pytest.raises(ConnStrError, match=r"scheme 'redis' is not one of \['mqtt'")),
    ("mqtt", "mqtt://h:1/x", None, pytest.raises(ConnStrError, match="unexpected path")),
    ("redis", "redis://h/db0", None, pytest.raises(ConnStrError, match=r"\[/db\]")),
    ("amqp", "amqp://:5672", None, pytest.raises(ConnStrError, match=r"no host; expected 'host;port;username'")),
    ("kafka", "h;9093", Endpoint("kafka", "h", 9093, servers=("h:9093",)), nullcontext()),
    ("kafka", "a,b:9000,[::1]:9001", Endpoint("kafka", "a", 9092, servers=("a:9092", "b:9000", "[::1]:9001")),
     nullcontext()),
    ("kafka", "kafka://h:9092", None, pytest.raises(ConnStrError, match=r"no URL scheme in a Kafka conn-str; expected 'host;port' or")),
    ("kafka", "a:9092,", None, pytest.raises(ConnStrError, match="no host in ''")),
    ("kafka", "h:99999", None, pytest.raises(ConnStrError, match="port 99999 out of range")),
    ("kafka", "u:pw@h", None, pytest.raises(ConnStrError, match=r"^kafka conn-str: no credentials here")),
    ("zmq", "h;9092", None, pytest.raises(ConnStrError, match=r"unknown broker protocol 'zmq'; known: \[")),
])
def test_parse_conn_str(proto: str, conn_str: str, expected: Endpoint | None,
                        raises: AbstractContextManager[Any]) -> None:
    with raises:
        assert parse_conn_str(proto, conn_str, environ=NO_ENV) == expected


def test_parse_conn_str_credentials_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg_mqtt.txt"
    cfg.write_text("[message-broker]\nusername = file-user\npassword = file-pass\nclient-id = cam-7\n")
    ep = parse_conn_str("mqtt", "mqtt://url-user:url-pass@h", credentials_file=cfg, environ=NO_ENV)
    assert (ep.username, ep.password, dict(ep.options)) == ("file-user", "file-pass", {"client-id": "cam-7"})
    env = {"INFERSTREAM_BROKER_USERNAME": "env-user", "INFERSTREAM_BROKER_PASSWORD": "env-pass"}
    ep = parse_conn_str("mqtt", "mqtt://url-user:url-pass@h", credentials_file=cfg, environ=env)
    assert (ep.username, ep.password) == ("env-user", "env-pass")
    assert "env-pass" not in repr(ep)


def test_parse_conn_str_credentials_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConnStrError, match="broker config .*missing.txt"):
        parse_conn_str("mqtt", "h", credentials_file=tmp_path / "missing.txt")
    cfg = tmp_path / "cfg.txt"
    cfg.write_text("[other]\nusername=x\n")
    with pytest.raises(ConnStrError, match=r"no \[message-broker\] section"):
        parse_conn_str("mqtt", "h", credentials_file=cfg)


def test_parse_conn_str_tls_option_changes_default_port() -> None:
    ep = parse_conn_str("amqp", "h", tls=TlsOptions(enabled=True, ca_file="/ca.pem"), environ=NO_ENV)
    assert ep.port == 5671 and ep.tls.ca_file == "/ca.pem"


def test_broker_table_targets_import() -> None:
    for proto in BROKERS:
        client = create_client(parse_conn_str(proto, "127.0.0.1;1", environ=NO_ENV))
        assert callable(client.publish_batch)
        client.close()


def test_create_client_rejects_unknown_protocol() -> None:
    with pytest.raises(ConnStrError, match="unknown broker protocol 'zmq'"):
        create_client(Endpoint("zmq", "h", 9092))


@pytest.mark.parametrize(("text", "expected"), [
    ("conn-str=mqtt://user:s3cret@host:1883 x", "conn-str=mqtt://user:***@host:1883 x"),
    ("'redis://:s3cret@h/0'", "'redis://:***@h/0'"),
    ("amqps://u:p@ss/w@h/vhost", "amqps://u:***@h/vhost"),  # an unquoted @ or / in the password
    ("mqtt://host:1883 mqtt://user@h", "mqtt://host:1883 mqtt://user@h"),  # nothing secret
    ("expected 'mqtt://[user:pass@]host[:port]'", "expected 'mqtt://[user:pass@]host[:port]'"),  # a format hint
])
def test_redact_credentials_hides_url_passwords_only(text: str, expected: str) -> None:
    from inferstream.messaging.brokers import redact_credentials

    assert redact_credentials(text) == expected


def test_kafka_librdkafka_config_precedence(tmp_path: Path) -> None:
    """Derived from TLS and credentials < the file's proto-cfg < its other keys < INFERSTREAM_KAFKA_*."""
    from inferstream.messaging.brokers.kafka import librdkafka_config

    cfg = tmp_path / "cfg_kafka.txt"
    cfg.write_text('[message-broker]\nusername = u\npassword = p\nclient-id = cam-7\nshare-connection = 1\n'
                   'proto-cfg = "linger.ms=20;sasl.mechanism=SCRAM-SHA-256"\nsasl.mechanism = SCRAM-SHA-512\n')
    tls = TlsOptions(enabled=True, ca_file="/ca.pem")
    ep = parse_conn_str("kafka", "h:1", tls=tls, credentials_file=cfg, environ=NO_ENV)
    env = {"INFERSTREAM_KAFKA_SASL_PASSWORD": "from-env", "INFERSTREAM_KAFKA_COMPRESSION_TYPE": "lz4"}
    assert librdkafka_config(ep, env) == {
        "security.protocol": "SASL_SSL", "ssl.ca.location": "/ca.pem", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "u", "sasl.password": "from-env", "linger.ms": "20", "compression.type": "lz4"}
    assert "'p'" not in repr(ep) and "SCRAM" not in repr(ep)  # password and file options stay out of logs


@pytest.mark.parametrize(("env", "message"), [
    ({"INFERSTREAM_KAFKA_ACKS": "1"}, r"\['acks'\] are set by inferstream"),
    ({"INFERSTREAM_KAFKA_ENABLE_IDEMPOTENCE": "false"}, r"\['enable.idempotence'\] are set"),
])
def test_kafka_librdkafka_config_refuses_the_delivery_guarantee_keys(env: dict[str, str], message: str) -> None:
    from inferstream.errors import ConfigError
    from inferstream.messaging.brokers.kafka import librdkafka_config

    with pytest.raises(ConfigError, match=message):
        librdkafka_config(parse_conn_str("kafka", "h", environ=NO_ENV), env)
