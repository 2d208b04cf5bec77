"""At-least-once delivery off the streaming thread: a bounded inbox, a memory buffer, a disk spool, one worker.

::

    submit() ──put_nowait──▶ inbox (queue_size) ──worker──▶ memory (memory_messages) ──▶ client.publish_batch
      (streaming thread,           │ full: counted drop         │ over the bound: oldest spill to ▲
       never blocks, no I/O)       ▼                             ▼                                │ replayed first
                               dropped_queue_full             spool/ (segments on disk) ──────────┘

Order is kept: everything in the spool is older than everything in memory, the spool is replayed first, and a
batch is retried from its first unconfirmed message. A message leaves the buffers only when the broker confirmed
it (``BrokerClient`` contract); after a connection loss the unconfirmed tail is resent, so a subscriber may see
duplicates (at least once, never lost while the buffers have room). ``close()`` writes whatever is still in memory
to the spool, and a new Publisher on the same ``spool_dir`` sends the leftovers before anything new; ``kill -9``
loses only what had not reached the spool yet (the inbox and memory: at most ``queue_size + memory_messages``;
set ``memory_messages=0`` to spool every message at once while disconnected).

Warnings and errors go to ``on_event`` (called from the worker thread; the GStreamer element turns them into bus
messages). Drops are counted on the caller's thread and reported by the worker at most every ``warn_interval``.
A full or failing spool disk is a warning (``spool-write-failed``) with the drop policy applied, never a stop. A
broker that refuses us for good (:class:`BrokerRejectedError`: credentials, permissions) is an error at once
(``rejected``): the worker stops and keeps what is unsent in the spool, instead of retrying forever.
"""
from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from inferstream.messaging.brokers.base import (
    BrokerClient,
    BrokerError,
    BrokerRejectedError,
    BrokerUnavailableError,
    TlsOptions,
)
from inferstream.messaging.publisher_records import (
    EventLevel,
    FlushReport,
    PublisherConfig,
    PublisherEvent,
    PublisherStats,
)
from inferstream.messaging.spool import Message, Spool


class Publisher:
    """Owns one broker client on a background thread.

    Args:
        client: an unconnected :class:`~inferstream.messaging.brokers.base.BrokerClient`; from now on only the
            worker thread touches it.
        config: buffering, spool and reconnect settings.
        on_event: receives :class:`PublisherEvent`; called from the worker thread (and from ``start``), so it
            must be thread-safe and quick.
    """

    def __init__(self, client: BrokerClient, config: PublisherConfig | None = None,
                 on_event: Callable[[PublisherEvent], None] | None = None) -> None:
        self.config: Final = config or PublisherConfig()
        self._client = client
        self._on_event = on_event
        self._inbox: queue.Queue[Message] = queue.Queue(self.config.queue_size)
        self._memory: deque[Message] = deque()
        c = self.config
        self._spool = None if c.spool_dir is None else Spool(
            c.spool_dir, max_bytes=c.spool_max_bytes, segment_bytes=c.spool_segment_bytes, fsync=c.spool_fsync,
            full_policy=c.full_policy)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._connected = False
        self._accepted = self._delivered = self._spooled = 0
        self._dropped_queue = self._dropped_buffer = self._errors = self._reconnects = 0
        self._recovered = len(self._spool) if self._spool is not None else 0
        self._in_memory = 0
        self._in_spool = self._recovered
        self._reported: dict[str, tuple[int, float]] = {}  # what: (count last reported, when)

    @classmethod
    def for_broker(cls, proto: str, conn_str: str, config: PublisherConfig | None = None, *,
                   on_event: Callable[[PublisherEvent], None] | None = None,
                   credentials_file: str | Path | None = None, tls: TlsOptions | None = None,
                   **client_options: Any) -> Publisher:
        """``parse_conn_str`` + ``create_client`` + ``Publisher`` in one call (not started).

        Raises:
            ConnStrError: see :func:`~inferstream.messaging.brokers.base.parse_conn_str`.
        """
        from inferstream.messaging.brokers import create_client, parse_conn_str

        endpoint = parse_conn_str(proto, conn_str, tls=tls, credentials_file=credentials_file)
        return cls(create_client(endpoint, **client_options), config, on_event)

    # -- caller side -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect (once, on this thread) and start the worker.

        Raises:
            BrokerUnavailableError: ``fail_fast`` is set and the broker cannot be reached.
            BrokerRejectedError: the broker refused the credentials or the access (whatever ``fail_fast`` says).
            RuntimeError: already started.
        """
        if self._thread is not None:
            raise RuntimeError("Publisher already started")
        if self._recovered and self._spool is not None:
            self._emit("info", "spool-recovered", f"{self._recovered} message(s) left in {self._spool.dir} "
                       "from an earlier run; sending them first")
        if self._spool is not None and self._spool.corrupt:
            self._emit("warning", "spool-recovered", f"cut {self._spool.corrupt} torn segment tail(s) in "
                       f"{self._spool.dir} (a crash while writing)")
        try:
            self._client.connect(self.config.connect_timeout)
            self._connected = True
        except BrokerRejectedError:
            self._close_spool()
            raise
        except BrokerError as exc:
            if self.config.fail_fast:
                self._close_spool()
                raise BrokerUnavailableError(f"broker unreachable at start (fail-fast): {exc}") from exc
            self._emit("warning", "connect-failed", f"{exc}; buffering and retrying in the background")
        self._thread = threading.Thread(target=self._run, name="inferstream-publisher", daemon=True)
        self._thread.start()

    def submit(self, topic: str, payload: bytes, key: str | None = None) -> bool:
        """Queue one message without blocking; ``False`` (and a counted drop) when the inbox is full."""
        try:
            self._inbox.put_nowait(Message(topic, payload, key))
        except queue.Full:
            with self._lock:
                self._dropped_queue += 1
            return False
        with self._lock:
            self._accepted += 1
        return True

    def stats(self) -> PublisherStats:
        with self._lock:
            return PublisherStats(
                self._connected, self._accepted, self._recovered, self._delivered, self._pending(),
                self._in_memory, self._in_spool, self._spooled, self._dropped_queue, self._dropped_buffer,
                self._errors, self._reconnects)

    def flush(self, timeout: float) -> FlushReport:
        """Wait until every accepted message is confirmed, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._pending() and not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.1))
            return self._report()

    def close(self, timeout: float = 10.0) -> FlushReport:
        """Flush for up to ``timeout`` s, stop the worker, spool what is left (if there is a spool)."""
        if self._thread is not None:
            self.flush(timeout)
            self._stop.set()
            self._thread.join(max(timeout, 1.0))
            self._thread = None
        else:
            self._stop.set()
            self._finish()
        with self._lock:
            return self._report()

    # -- shared helpers ------------------------------------------------------------------------------------------
    def _pending(self) -> int:
        return self._accepted + self._recovered - self._delivered - self._dropped_buffer

    def _report(self) -> FlushReport:
        return FlushReport(self._delivered, self._pending(), self._in_spool,
                           self._dropped_queue + self._dropped_buffer)

    def _emit(self, level: EventLevel, code: str, text: str) -> None:
        if self._on_event is not None:
            with contextlib.suppress(Exception):  # a broken callback must not stop delivery
                self._on_event(PublisherEvent(level, code, text))

    def _close_spool(self) -> None:
        if self._spool is not None:
            self._spool.close()

    # -- worker ----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._loop()
        except BrokerRejectedError as exc:
            self._emit("error", "rejected", f"{exc}; stopped sending ({self._pending()} message(s) unsent)")
        except Exception as exc:  # noqa: BLE001
            self._emit("error", "worker-error", f"publisher worker stopped: {type(exc).__name__}: {exc}")
        finally:
            self._finish()

    def _loop(self) -> None:
        backoff = self.config.backoff_initial
        next_attempt = 0.0
        while not self._stop.is_set():
            self._drain(block=0.0)
            self._report_drops()
            if not self._connected:
                now = time.monotonic()
                if now < next_attempt:
                    self._drain(block=min(next_attempt - now, 0.1))
                    continue
                try:
                    self._client.connect(self.config.connect_timeout)
                except BrokerRejectedError:
                    raise
                except BrokerError as exc:
                    next_attempt = time.monotonic() + backoff * random.uniform(0.8, 1.0)
                    if backoff == self.config.backoff_initial:
                        self._emit("warning", "connect-failed", f"{exc}; retrying with backoff")
                    backoff = min(backoff * 2, self.config.backoff_max)
                    continue
                backoff = self.config.backoff_initial
                with self._lock:
                    self._connected = True
                    self._reconnects += 1
                self._emit("info", "connected", f"reconnected; {self._pending()} message(s) pending")
            if not self._send_one_batch():
                self._drain(block=0.05)

    def _drain(self, block: float) -> None:
        """Inbox -> memory (spilling the oldest to the spool past the bound); waits up to ``block`` s for one."""
        got = 0
        try:
            if block > 0:
                self._memory.append(self._inbox.get(timeout=block))
                got += 1
            while got < 100_000:
                self._memory.append(self._inbox.get_nowait())
                got += 1
        except queue.Empty:
            pass
        limit = self.config.memory_messages
        # disconnected (or already replaying the spool): keep ``limit`` in memory; connected: allow a burst first
        burst = max(2 * limit, 4 * self.config.batch_size)
        if len(self._memory) > limit and (not self._connected or self._in_spool or len(self._memory) > burst):
            self._spill(len(self._memory) - limit)
        with self._changed:
            self._in_memory = len(self._memory)
            if got:
                self._changed.notify_all()

    def _spill(self, n: int) -> None:
        """Move the ``n`` oldest memory messages to the spool (or drop per policy when there is none)."""
        if self._spool is None:
            if self.config.full_policy == "drop-oldest":
                for _ in range(n):
                    self._memory.popleft()
            else:
                for _ in range(n):
                    self._memory.pop()
            self._count_buffer_drops(n)
            return
        chunk = [self._memory.popleft() for _ in range(n)]
        before = self._spool.appended
        dropped = self._spool.append(chunk)
        with self._lock:
            self._spooled += self._spool.appended - before
            self._in_spool = len(self._spool)
        if dropped:
            self._count_buffer_drops(dropped)
        self._report_disk_errors()

    def _report_disk_errors(self) -> None:
        assert self._spool is not None
        if self._due("disk", self._spool.write_errors) is not None:
            exc = self._spool.last_error
            why = exc.strerror if exc is not None and exc.strerror else str(exc)
            self._emit("warning", "spool-write-failed",
                       f"spool {self._spool.dir}: {why}; {self.config.full_policy} applied "
                       f"({self._dropped_buffer} message(s) dropped so far, {len(self._spool)} kept on disk)")

    def _due(self, what: str, count: int) -> int | None:
        """The count last reported for ``what`` when ``count`` grew and a report is due (the first at once, then at
        most every ``warn_interval``), else None."""
        last, at = self._reported.get(what, (0, 0.0))
        now = time.monotonic()
        if count <= last or (last and now - at < self.config.warn_interval):
            return None
        self._reported[what] = (count, now)
        return last

    def _count_buffer_drops(self, n: int) -> None:
        with self._changed:
            self._dropped_buffer += n
            self._changed.notify_all()

    def _report_drops(self) -> None:
        total = self._dropped_queue + self._dropped_buffer
        if (last := self._due("drops", total)) is not None:
            code = "queue-full" if self._dropped_queue else "buffer-full"
            self._emit("warning", code, f"dropped {total - last} message(s) "
                       f"({self._dropped_queue} at a full inbox, {self._dropped_buffer} at full buffers so far)")

    def _send_one_batch(self) -> bool:
        """Publish the oldest batch (spool first); False when there was nothing to send."""
        from_spool = self._spool is not None and len(self._spool) > 0
        if from_spool:
            assert self._spool is not None
            batch = self._spool.peek(self.config.batch_size)
        else:
            batch = [self._memory[i] for i in range(min(self.config.batch_size, len(self._memory)))]
        if not batch:
            return False
        rejected: BrokerRejectedError | None = None
        try:
            done = self._client.publish_batch(batch)
            failure: BaseException | None = None
        except BrokerRejectedError as exc:
            done, failure, rejected = exc.confirmed, exc, exc
        except BrokerError as exc:
            done, failure = exc.confirmed, exc
        except Exception as exc:  # noqa: BLE001
            done, failure = 0, exc
        if from_spool:
            assert self._spool is not None
            self._spool.ack(done)
        else:
            for _ in range(done):
                self._memory.popleft()
        with self._changed:
            self._delivered += done
            self._in_memory = len(self._memory)
            self._in_spool = len(self._spool) if self._spool is not None else 0
            if failure is not None:
                self._connected = False
                self._errors += 1
            self._changed.notify_all()
        if rejected is not None:
            raise rejected
        if failure is not None:
            self._client.close()
            self._emit("warning", "disconnected", f"{failure}; {self._pending()} message(s) kept for resending")
        return True

    def _finish(self) -> None:
        """Worker exit: save memory (and the inbox) to the spool, close client and spool."""
        self._drain(block=0.0)
        if self._spool is not None and self._memory:
            self._spill(len(self._memory))
            self._emit("info", "spooling", f"{len(self._spool)} unsent message(s) saved in {self._spool.dir}")
        with self._lock:
            self._in_memory = len(self._memory)
            self._connected = False
        self._client.close()
        self._close_spool()
