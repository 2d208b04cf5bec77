"""Publisher against an in-memory client whose broker can go away: buffering, spooling, replay, drops, events."""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from inferstream.messaging.brokers import BrokerError, BrokerUnavailableError
from inferstream.messaging.publisher import Publisher
from inferstream.messaging.publisher_records import PublisherConfig, PublisherEvent
from inferstream.messaging.spool import SpoolLockedError


class FakeClient:
    """A broker that confirms everything while ``up``; ``fail_after`` confirms that many, then drops the line."""

    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.connected = False
        self.received: list[bytes] = []
        self.fail_after: int | None = None
        self.connects = 0

    def connect(self, timeout: float) -> None:
        self.connects += 1
        if not self.up:
            raise BrokerUnavailableError("fake broker down")
        self.connected = True

    def publish(self, topic: str, payload: bytes, key: str | None = None) -> None:
        self.publish_batch([(topic, payload, key)])

    def publish_batch(self, messages: Sequence[tuple[str, bytes, str | None]]) -> int:
        if not (self.up and self.connected):
            self.connected = False
            raise BrokerError("fake broker gone")
        if self.fail_after is not None and self.fail_after < len(messages):
            n, self.fail_after = self.fail_after, None
            self.received.extend(m[1] for m in messages[:n])
            self.connected = False
            raise BrokerError("fake connection reset", confirmed=n)
        self.received.extend(m[1] for m in messages)
        return len(messages)

    def close(self) -> None:
        self.connected = False


def _cfg(tmp_path: Path | None, **kw: Any) -> PublisherConfig:
    base: dict[str, Any] = {"spool_dir": None if tmp_path is None else tmp_path / "spool", "backoff_initial": 0.02,
                            "backoff_max": 0.05, "batch_size": 16}
    return PublisherConfig(**{**base, **kw})


def _p(i: int) -> bytes:
    return f"{i:06d}".encode()


def test_publisher_delivers_in_order() -> None:
    client = FakeClient()
    pub = Publisher(client, _cfg(None))
    pub.start()
    for i in range(500):
        assert pub.submit("t", _p(i))
    report = pub.flush(5)
    assert (report.delivered, report.pending, report.spooled, report.dropped) == (500, 0, 0, 0)
    assert client.received == [_p(i) for i in range(500)]
    stats = pub.stats()
    assert stats.connected and stats.accepted == 500 and stats.delivered == 500
    pub.close()


def test_publisher_outage_spools_then_replays_in_order(tmp_path: Path) -> None:
    client = FakeClient()
    events: list[PublisherEvent] = []
    pub = Publisher(client, _cfg(tmp_path, memory_messages=50), on_event=events.append)
    pub.start()
    for i in range(100):
        pub.submit("t", _p(i))
    assert pub.flush(5).pending == 0
    client.up = False
    for i in range(100, 400):
        pub.submit("t", _p(i))
    report = pub.flush(0.5)
    assert report.pending == 300 and report.spooled >= 250 and report.dropped == 0
    assert any(e.code in ("disconnected", "connect-failed") for e in events)
    client.up = True
    report = pub.flush(5)
    assert (report.delivered, report.pending, report.spooled) == (400, 0, 0)
    assert client.received == [_p(i) for i in range(400)]  # nothing lost, no duplicate, in order
    assert pub.stats().reconnects >= 1 and any(e.code == "connected" for e in events)
    pub.close()
    assert not list((tmp_path / "spool").glob("*.seg"))


def test_publisher_resends_only_unconfirmed_tail() -> None:
    client = FakeClient()
    pub = Publisher(client, _cfg(None))
    client.fail_after = 5
    pub.start()
    for i in range(40):
        pub.submit("t", _p(i))
    assert pub.flush(5).delivered == 40
    assert client.received == [_p(i) for i in range(40)]
    assert pub.stats().publish_errors == 1
    pub.close()


def test_publisher_close_spools_memory_and_next_publisher_sends_it_first(tmp_path: Path) -> None:
    down = FakeClient(up=False)
    first = Publisher(down, _cfg(tmp_path, memory_messages=1000))
    first.start()
    for i in range(30):
        first.submit("t", _p(i))
    report = first.close(timeout=0.2)
    assert (report.pending, report.spooled) == (30, 30)
    client = FakeClient()
    second = Publisher(client, _cfg(tmp_path))
    assert second.stats().recovered == 30
    second.start()
    for i in range(30, 40):
        second.submit("t", _p(i))
    assert second.flush(5).pending == 0
    assert client.received == [_p(i) for i in range(40)]
    second.close()


def test_publisher_queue_full_drops_and_warns() -> None:
    client = FakeClient()
    events: list[PublisherEvent] = []
    pub = Publisher(client, _cfg(None, queue_size=5), on_event=events.append)
    results = [pub.submit("t", _p(i)) for i in range(8)]  # not started: nobody drains the inbox
    assert results == [True] * 5 + [False] * 3
    assert pub.stats().dropped_queue_full == 3
    pub.start()
    report = pub.flush(5)
    assert (report.delivered, report.dropped) == (5, 3)
    assert any(e.code == "queue-full" and "dropped 3" in e.text for e in events)
    pub.close()


@pytest.mark.parametrize("policy", ["drop-oldest", "drop-newest"])
def test_publisher_full_spool_policy(tmp_path: Path, policy: str) -> None:
    client = FakeClient(up=False)
    events: list[PublisherEvent] = []
    cfg = _cfg(tmp_path, memory_messages=0, spool_max_bytes=2000, spool_segment_bytes=500, full_policy=policy)
    pub = Publisher(client, cfg, on_event=events.append)
    pub.start()
    for i in range(200):
        pub.submit("t", _p(i))
        time.sleep(0.0005)
    deadline = time.monotonic() + 5
    while pub.stats().in_spool + pub.stats().dropped_buffer_full < 200 and time.monotonic() < deadline:
        time.sleep(0.01)  # memory_messages=0: the worker moves everything to the spool (or drops it)
    stats = pub.stats()
    assert stats.dropped_buffer_full > 0 and stats.in_spool + stats.dropped_buffer_full == 200
    client.up = True
    report = pub.flush(5)
    pub.close()
    got = [int(p) for p in client.received]
    assert report.pending == 0 and report.dropped == stats.dropped_buffer_full == 200 - len(got)
    if policy == "drop-oldest":
        assert got == list(range(200 - len(got), 200))  # the newest survive
    else:
        assert got == list(range(len(got)))  # the oldest survive
    assert any(e.code == "buffer-full" for e in events)


@pytest.mark.parametrize(("policy", "expect"), [("drop-oldest", list(range(20, 30))),
                                                 ("drop-newest", list(range(10)))])
def test_publisher_without_spool_applies_policy_to_memory(policy: str, expect: list[int]) -> None:
    client = FakeClient(up=False)
    pub = Publisher(client, _cfg(None, memory_messages=10, full_policy=policy))
    pub.start()
    for i in range(30):
        pub.submit("t", _p(i))
    deadline = time.monotonic() + 5
    while pub.stats().dropped_buffer_full < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    client.up = True
    assert pub.flush(5).pending == 0
    pub.close()
    assert [int(p) for p in client.received] == expect


def test_publisher_fail_fast() -> None:
    pub = Publisher(FakeClient(up=False), _cfg(None, fail_fast=True))
    with pytest.raises(BrokerUnavailableError, match="fail-fast"):
        pub.start()


def test_publisher_second_on_same_spool_is_refused(tmp_path: Path) -> None:
    first = Publisher(FakeClient(), _cfg(tmp_path))
    with pytest.raises(SpoolLockedError):
        Publisher(FakeClient(), _cfg(tmp_path))
    first.close()


def test_publisher_survives_broken_event_callback() -> None:
    def boom(_: PublisherEvent) -> None:
        raise RuntimeError("callback bug")

    client = FakeClient(up=False)
    pub = Publisher(client, _cfg(None), on_event=boom)
    pub.start()
    pub.submit("t", _p(0))
    client.up = True
    assert pub.flush(5).delivered == 1
    pub.close()


def test_publisher_start_twice_is_an_error() -> None:
    pub = Publisher(FakeClient(), _cfg(None))
    pub.start()
    with pytest.raises(RuntimeError, match="already started"):
        pub.start()
    pub.close()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"queue_size": 0}, "queue_size >= 1"),
    ({"backoff_initial": 2.0, "backoff_max": 1.0}, "backoff_initial <= backoff_max"),
    ({"full_policy": "block"}, "full_policy must be"),
])
def test_publisher_config_rejects_bad_values(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PublisherConfig(**kwargs)
