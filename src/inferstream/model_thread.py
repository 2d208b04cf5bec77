"""The one thread a CPU model runs on: its load, warm-up and every batch, whichever thread asks.

torch's CPU kernels run on OpenMP (libgomp). Each thread that starts a parallel region gets a pool of workers of its
own, and an idle worker spins for the next region (300,000 spins by default) only while libgomp manages no more
threads than there are CPUs; past that, 100 spins, then it sleeps, and each of the hundreds of regions of a
forward pays the wake-ups (libgomp manual, ``GOMP_SPINCOUNT``). pyinfer loads its model on the application's thread
(``set_state``) and infers on a streaming thread (with a batch group, on whichever stream's thread fills the
batch): two pools or more, and every forward ran throttled. YOLOv8s at 640x480 on 2 cores: 59 ms per forward on
the only pool, 80 ms while a second one exists (BENCHMARKS.md, *pyinfer vs modelpipe*). On its own thread a model
keeps one pool; when the model is closed the thread ends, and its pool with it (a swapped-out model leaves no pool
behind).

The hop costs a queue put and a lock hand-off per batch: nothing next to a CPU forward. CUDA models do not use it
(their host threads launch kernels; OpenMP is not involved).
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


class ModelThread:
    """A daemon thread running one model's calls in order; ``run`` blocks until its call is done."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Future[object]] | None] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the thread; returns its result or raises its exception in the caller. On the thread itself,
        or once closed, ``fn`` runs in the caller (nothing waits for a thread that will not come)."""
        if self._closed or threading.current_thread() is self._thread:
            return fn()
        return self.submit(fn).result()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """``fn()`` on the thread, after the calls queued before it; its future (once closed: run in the caller,
        the future already done)."""
        future: Future[T] = Future()
        if self._closed:
            _fulfil(fn, future)
        else:
            self._jobs.put((fn, future))  # type: ignore[arg-type]
        return future

    def one_torch_thread(self) -> None:
        """One torch thread on this thread, the process default unchanged. Where the model's own runtime (ONNX
        Runtime, a server) or another thread does the heavy work, torch here only runs small pre- and post-processing
        steps, and OpenMP workers that spin after each of those small regions take a core from that work.
        ``torch.set_num_threads`` sets the calling thread's count and the default of threads yet to start: the
        default is put back from the calling thread."""
        import torch

        threads = torch.get_num_threads()
        self.run(lambda: torch.set_num_threads(1))
        torch.set_num_threads(threads)

    def close(self, wait: bool = False) -> None:
        """End the thread once the calls queued before this one are done; with ``wait``, return once it has ended
        (a process about to exit: a thread still ending while the runtime tears down can abort it)."""
        self._closed = True
        self._jobs.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            _fulfil(*job)


def _fulfil(fn: Callable[[], T], future: Future[T]) -> None:
    """``fn()``'s result or exception into ``future`` (raised again in the thread that waits for it)."""
    try:
        future.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 (the waiting thread reports it)
        future.set_exception(exc)
