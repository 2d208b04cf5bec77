"""The thread that finishes a batch group's batches when its model runs them on its own (a model server).

The thread whose arrival fills a batch runs it (``batching``), and with a model that returns at once, the batch is
done by then. A model server runs the batch elsewhere: were the leading thread to wait for it, decode it and write
its metadata, its own stream could hand no frame to the next batch meanwhile, and every next batch of the group
would wait for that one stream (on the H200, frames waited for their batch to fill longer than the server took to
run it: BENCHMARKS.md, *Fourteenth session*). So the leader only hands the batch over, and this thread collects,
delivers and unmaps the batches in the order they were handed over. At most ``lanes`` batches are handed over and
not yet collected: the model server's lanes, each a set of shared tensors that one batch at a time may use.
"""
from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable


class Completion:
    """A daemon thread running the calls ``put`` to it one after another, in order, and the lanes they hold."""

    def __init__(self, name: str, lanes: int) -> None:
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._free = threading.Semaphore(lanes)
        self._idle = threading.Condition()
        self._queued = 0
        self._thread = threading.Thread(target=self._loop, name=f"inferstream-complete-{name}", daemon=True)
        self._thread.start()

    def reserve(self) -> None:
        """Take a lane before a batch is handed over: waits while ``lanes`` batches are not yet collected."""
        self._free.acquire()

    def release(self) -> None:
        """A batch was collected: its lane is free again."""
        self._free.release()

    def put(self, call: Callable[[], None]) -> None:
        """Run ``call`` after every call put before it; it must not raise (the batch's own errors are its frames')."""
        with self._idle:
            self._queued += 1
        self._calls.put(call)

    def drain(self) -> None:
        """Return once every call put so far has run (a hot swap: no batch in flight)."""
        with self._idle:
            while self._queued:
                self._idle.wait()

    def close(self) -> None:
        """Run what was put, then end the thread."""
        self.drain()
        self._calls.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call()
            finally:
                with self._idle:
                    self._queued -= 1
                    self._idle.notify_all()
