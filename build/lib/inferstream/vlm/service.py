"""Runs a VlmBackend off the streaming threads: one bounded queue per backend, shared by every pyvlm client that
uses the same backend configuration (so an in-process model batches requests of several streams together).

A client (one per element) submits requests without blocking; a full queue drops the request and counts it. Its
answers are delivered to its ``on_answer`` callback (on a worker thread) and kept in its outbox until the element
takes them on its next buffer. ``run_now`` answers on the calling thread (the synchronous mode).
"""
from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from inferstream.vlm.backends import BackendConfig, VlmBackend, load_backend
from inferstream.vlm.types import VlmAnswer, VlmRequest, VlmRequestError

_Item = tuple[VlmRequest, "VlmClient"] | None  # None: stop


@dataclass
class ClientStats:
    """Counters of one client (the element's ``stats`` property): every request ends as exactly one of answered,
    failed (by kind) or dropped, or is still pending."""

    requested: int = 0
    answered: int = 0
    dropped: int = 0
    pending: int = 0
    failed: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        out = {"requested": self.requested, "answered": self.answered, "dropped": self.dropped,
               "pending": self.pending, "failed": sum(self.failed.values())}
        out.update({f"failed-{kind}": n for kind, n in sorted(self.failed.items())})
        return out


class VlmClient:
    """One element's view of a service: submit, take answers, stats."""

    def __init__(self, service: VlmService, on_answer: Callable[[VlmAnswer], None]) -> None:
        self._service, self._on_answer = service, on_answer
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._outbox: collections.deque[VlmAnswer] = collections.deque()
        self.stats = ClientStats()

    @property
    def backend(self) -> VlmBackend:
        return self._service.backend

    def submit(self, request: VlmRequest) -> bool:
        """Queue ``request`` without blocking; False (and counted as dropped) when the queue is full."""
        with self._lock:
            self.stats.requested += 1
            self.stats.pending += 1
        if self._service.offer(request, self):
            return True
        with self._lock:
            self.stats.pending -= 1
            self.stats.dropped += 1
        return False

    def run_now(self, requests: list[VlmRequest]) -> list[VlmAnswer]:
        """Answer ``requests`` on this thread (synchronous mode); counted like submitted ones."""
        with self._lock:
            self.stats.requested += len(requests)
            self.stats.pending += len(requests)
        answers = self._service.run_now(requests)
        for answer in answers:
            self._on_answer(answer)
            with self._lock:
                self._count(answer)
        return answers

    def reject(self, answer: VlmAnswer) -> None:
        """Count a request that failed before it could be sent (``answer.error`` set), and report it."""
        with self._lock:
            self.stats.requested += 1
            self.stats.pending += 1
        self._on_answer(answer)
        with self._lock:
            self._count(answer)

    def deliver(self, answer: VlmAnswer) -> None:
        """Called by a worker thread: report, keep for the element's next buffer, then count it done. In that order:
        ``wait_idle`` (at EOS) returns once nothing is pending, and by then the answer's bus message is posted and
        ``take`` finds it."""
        self._on_answer(answer)
        with self._lock:
            self._outbox.append(answer)
            self._count(answer)

    def _count(self, answer: VlmAnswer) -> None:
        """One pending request done (the caller holds the lock)."""
        self.stats.pending -= 1
        if answer.error is None:
            self.stats.answered += 1
        else:
            self.stats.failed[answer.error.kind] = self.stats.failed.get(answer.error.kind, 0) + 1
        self._idle.notify_all()

    def take(self) -> list[VlmAnswer]:
        """Answers that arrived since the last call, in arrival order."""
        with self._lock:
            out = list(self._outbox)
            self._outbox.clear()
        return out

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request of this client is pending (at EOS); False on timeout."""
        with self._lock:
            return self._idle.wait_for(lambda: self.stats.pending <= 0, timeout_s)

    def close(self) -> None:
        self._service.release()


class VlmService:
    """A backend, its bounded queue and its worker threads (``backend.concurrency`` of them)."""

    def __init__(self, backend: VlmBackend, batch_size: int, queue_size: int) -> None:
        self.backend, self._batch = backend, batch_size
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=queue_size)
        self._run_lock = threading.Lock() if backend.concurrency == 1 else None
        self._users = 0
        self._threads = [threading.Thread(target=self._loop, name=f"pyvlm-{i}", daemon=True)
                         for i in range(backend.concurrency)]
        for t in self._threads:
            t.start()

    def offer(self, request: VlmRequest, client: VlmClient) -> bool:
        try:
            self._queue.put_nowait((request, client))
        except queue.Full:
            return False
        return True

    def run_now(self, requests: list[VlmRequest]) -> list[VlmAnswer]:
        if self._run_lock is None:
            return self.backend.answer(requests)
        with self._run_lock:
            return [a for i in range(0, len(requests), self._batch)
                    for a in self.backend.answer(requests[i:i + self._batch])]

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            batch = [item]
            while len(batch) < self._batch:  # what is already queued joins the batch; nothing waits for more
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                batch.append(more)
            requests = [req for req, _ in batch]
            try:
                if self._run_lock is None:
                    answers = self.backend.answer(requests)
                else:
                    with self._run_lock:
                        answers = self.backend.answer(requests)
            except Exception as exc:  # noqa: BLE001
                err = VlmRequestError("model", f"{type(exc).__name__}: {exc}")
                answers = [VlmAnswer(req, error=err) for req in requests]
            for (_, client), answer in zip(batch, answers):
                client.deliver(answer)

    def stop(self) -> None:
        while True:  # the clients are gone: what they left queued is not run
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._queue.put(None)
        self.backend.close()

    def release(self) -> None:
        _release(self)


_SERVICES: dict[tuple[BackendConfig, int, int], VlmService] = {}
_REGISTRY_LOCK = threading.Lock()


def connect(cfg: BackendConfig, batch_size: int, queue_size: int,
            on_answer: Callable[[VlmAnswer], None]) -> VlmClient:
    """A client of the service for ``cfg`` (loaded on first use, shared by later clients with the same settings).

    Raises: what ``load_backend`` raises.
    """
    key = (cfg, batch_size, queue_size)
    with _REGISTRY_LOCK:
        service = _SERVICES.get(key)
        if service is None:
            service = _SERVICES[key] = VlmService(load_backend(cfg), batch_size, queue_size)
        service._users += 1
    return VlmClient(service, on_answer)


def _release(service: VlmService) -> None:
    with _REGISTRY_LOCK:
        service._users -= 1
        if service._users > 0:
            return
        for key, value in list(_SERVICES.items()):
            if value is service:
                del _SERVICES[key]
    service.stop()
