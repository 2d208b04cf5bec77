"""What a ``messaging.publisher.Publisher`` takes and tells: its tuning, its events, its counters and what a flush
reports. Plain records, shared by the publisher, the ``pymsgbroker`` element and the app."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from inferstream.messaging.spool import FsyncPolicy, FullPolicy

EventLevel = Literal["info", "warning", "error"]


@dataclass(frozen=True, slots=True)
class PublisherEvent:
    """Something the application should hear about. ``code``: connected, disconnected, connect-failed,
    queue-full, buffer-full, spooling, spool-recovered, spool-write-failed, rejected, worker-error."""

    level: EventLevel
    code: str
    text: str


@dataclass(frozen=True, slots=True)
class PublisherConfig:
    """Tuning of a :class:`Publisher`.

    Attributes:
        queue_size: bound of the inbox that ``submit`` fills; when full, ``submit`` drops and counts.
        memory_messages: messages kept in memory while they cannot be sent; beyond this the oldest go to the
            spool (or, without a spool, ``full_policy`` applies to memory).
        spool_dir: directory of the disk spool; ``None`` keeps everything in memory (lost on exit).
        spool_max_bytes, spool_segment_bytes, spool_fsync: see :class:`~inferstream.messaging.spool.Spool`.
        full_policy: ``"drop-oldest"`` or ``"drop-newest"`` once memory and spool are full.
        batch_size: messages per ``publish_batch`` (pipelining depth; also the unit resent after a loss).
        connect_timeout: seconds for one connection attempt.
        backoff_initial, backoff_max: reconnect delays in seconds, doubling from the first to the second.
        fail_fast: ``start()`` raises BrokerUnavailableError when the first connection fails; otherwise it posts
            a warning and buffers until the broker appears.
        warn_interval: seconds between two reports of continuing drops.
    """

    queue_size: int = 10_000
    memory_messages: int = 10_000
    spool_dir: str | Path | None = None
    spool_max_bytes: int = 1 << 30
    spool_segment_bytes: int = 16 << 20
    spool_fsync: FsyncPolicy = "write"
    full_policy: FullPolicy = "drop-oldest"
    batch_size: int = 256
    connect_timeout: float = 5.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    fail_fast: bool = False
    warn_interval: float = 5.0

    def __post_init__(self) -> None:
        if self.queue_size < 1 or self.memory_messages < 0 or self.batch_size < 1:
            raise ValueError(f"need queue_size >= 1, memory_messages >= 0, batch_size >= 1; got {self.queue_size}, "
                             f"{self.memory_messages}, {self.batch_size}")
        if not 0 < self.backoff_initial <= self.backoff_max:
            raise ValueError(f"need 0 < backoff_initial <= backoff_max, got {self.backoff_initial}, "
                             f"{self.backoff_max}")
        if self.full_policy not in ("drop-oldest", "drop-newest"):
            raise ValueError(f"full_policy must be 'drop-oldest' or 'drop-newest', got {self.full_policy!r}")


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """Counters since start. ``recovered``: found in the spool at start; ``pending`` = accepted + recovered -
    delivered - dropped_buffer_full; ``spooled``: records written to the spool; ``reconnects``: successful
    connections made by the worker (after a loss, or after a failed first attempt)."""

    connected: bool
    accepted: int
    recovered: int
    delivered: int
    pending: int
    in_memory: int
    in_spool: int
    spooled: int
    dropped_queue_full: int
    dropped_buffer_full: int
    publish_errors: int
    reconnects: int


@dataclass(frozen=True, slots=True)
class FlushReport:
    """``delivered``: confirmed since start; ``pending``: not yet confirmed; ``spooled``: of those, on disk;
    ``dropped``: lost to full buffers (inbox, memory or spool) since start."""

    delivered: int
    pending: int
    spooled: int
    dropped: int
