"""Run the per-frame Python of many streaming threads on one shared thread, one job after another.

With N streams, N GStreamer streaming threads each run a few hundred microseconds of Python per frame under one
GIL, and most of their wall time goes to GIL hand-offs between threads, not to computing (BENCHMARKS.md, *Figures
from the code*). A streaming thread that hands its job
to a ``SerialWorker`` only queues it and sleeps (the GIL released) until it is done. The worker runs the queued
jobs back to back, so there are two GIL hand-offs per job instead of one per preemption.

The worker releases the GIL between jobs (``time.sleep(0)``): a thread that needs it back, such as a pyinfer batch
thread coming back from the GPU, then waits one job at most instead of the switch interval (5 ms). With one user
(``acquire``/``release`` count them) the hop is pure cost, so jobs then run in the caller's thread.

``priority()`` marks latency-critical work, such as a batch on its way through the GPU: no worker starts a job
while one is open (for ``MAX_HOLD_S`` at most). A batch makes dozens of torch calls, each of which releases the GIL
and then waits to get it back; with a worker busy in Python meanwhile each wait lasted up to one job, which
stretched a batch several times over. Held back, the worker leaves the GIL to the batch.

No GStreamer here: jobs are plain callables. A job's exception is raised in the thread that submitted it.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

MAX_HOLD_S = 0.05
"""The longest a worker holds a job back for ``priority()`` sections, so that back-to-back sections (several batch
groups) cannot starve it."""


class _PriorityGate:
    """Counts open ``priority()`` sections; workers wait on it before each job."""

    def __init__(self) -> None:
        self._open = 0
        self._cond = threading.Condition()

    @contextmanager
    def section(self) -> Iterator[None]:
        with self._cond:
            self._open += 1
        try:
            yield
        finally:
            with self._cond:
                self._open -= 1
                if not self._open:
                    self._cond.notify_all()

    def wait_clear(self, timeout_s: float) -> None:
        if not self._open:  # the usual case, read without the lock: a section opening now is not waited for
            return
        with self._cond:
            self._cond.wait_for(lambda: not self._open, timeout_s)


_GATE = _PriorityGate()


def priority() -> AbstractContextManager[None]:
    """A section during which no ``SerialWorker`` starts a job (see the module docstring)."""
    return _GATE.section()


def _held_lock() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Job(Generic[T]):
    fn: Callable[[], T]
    done: threading.Lock = field(default_factory=_held_lock)  # released by the worker: the cheapest wake-up
    result: T | None = None
    error: BaseException | None = None


class SerialWorker:
    """A daemon thread running submitted callables in submission order (started on first use)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: deque[_Job[object]] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._users = 0

    def acquire(self) -> None:
        """Count one more user (e.g. a started element)."""
        with self._cond:
            self._users += 1

    def release(self) -> None:
        with self._cond:
            self._users = max(0, self._users - 1)

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the worker thread; blocks until it returned and returns its result (or raises its error).

        Runs ``fn`` in the calling thread when there is at most one user, and for a job submitting a job (the
        worker would wait for itself)."""
        if self._users <= 1 or threading.current_thread() is self._thread:
            return fn()
        job: _Job[T] = _Job(fn)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._jobs.append(job)  # type: ignore[arg-type]
            self._cond.notify()
        job.done.acquire()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                batch, self._jobs = self._jobs, deque()
            for job in batch:
                _GATE.wait_clear(MAX_HOLD_S)
                try:
                    job.result = job.fn()
                except BaseException as exc:  # handed to the submitting thread, which reports it
                    job.error = exc
                job.done.release()
                time.sleep(0)  # let a thread waiting for the GIL have it now (see the module docstring)


_WORKERS: dict[str, SerialWorker] = {}
_WORKERS_LOCK = threading.Lock()


def shared_worker(name: str) -> SerialWorker:
    """The process-wide worker called ``name`` (one per kind of job, e.g. every pytracker of the process)."""
    with _WORKERS_LOCK:
        worker = _WORKERS.get(name)
        if worker is None:
            worker = _WORKERS[name] = SerialWorker(name)
        return worker
