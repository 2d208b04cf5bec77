"""Hot swap (DESIGN.md "Hot swap"): a model set while PLAYING is loaded and warmed on a background thread, then
swapped into the stream's batch group between two batches. A model that fails to load, or that a newer request
supersedes while it loads, leaves the running one; one that fails on its first real batch is rolled back by the
group (``batching.BatchGroup.swap``). No GStreamer here: the element turns the outcomes (``SwapEvents``) into bus
messages and its ``model`` property."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from inferstream.errors import ConfigError

if TYPE_CHECKING:
    from inferstream.batching import BatchGroup
    from inferstream.inference import ModelStep


class SwapEvents(Protocol):
    """What a swap tells the element (any thread: the loader's, or the batch's for a rollback)."""

    def warn(self, exc: BaseException, text: str) -> None: ...

    def swapped(self, old_model: str, new_model: str) -> None: ...

    def show_running(self, model: str) -> None:
        """Let the element's ``model`` read the running model again (no swap for that)."""


class ModelSwap:
    """One element's swap requests; ``attach`` the group at start, ``detach`` at stop (cancels a load in flight).

    Args:
        load: loads and warms a model step for a model name (``runner.settings.infer_config`` + warm-up).
        events: where the outcomes go.
    """

    def __init__(self, load: Callable[[str], ModelStep], events: SwapEvents) -> None:
        self._load, self._events = load, events
        self._lock = threading.Lock()
        self._generation = 0  # of the newest request: an older one still loading is cancelled
        self._requested = ""
        self._group: BatchGroup | None = None

    def attach(self, group: BatchGroup) -> None:
        with self._lock:
            self._group = group

    def detach(self) -> None:
        with self._lock:
            self._generation += 1  # cancels a swap still loading
            self._group = None

    @property
    def attached(self) -> bool:
        return self._group is not None

    def request(self, model: str, thread_name: str = "inferstream-swap") -> None:
        """Load ``model`` on a background thread (``thread_name``) and swap it in (returns at once)."""
        with self._lock:
            self._generation += 1
            generation, self._requested = self._generation, model
        threading.Thread(target=self._load_and_swap, args=(generation, model), name=thread_name,
                         daemon=True).start()

    def _running(self) -> str:
        group = self._group
        return group.cfg.model if group is not None else "?"

    def _load_and_swap(self, generation: int, model: str) -> None:
        try:
            step = self._load(model)
        except Exception as exc:  # keep the old model running
            current = self._running()
            self._events.warn(exc, f"model swap to {model!r} failed, still running {current!r}")
            self._show(generation, current)
            return
        with self._lock:
            group = self._group
            if generation != self._generation or group is None:
                step.close()
                self._events.warn(ConfigError(f"superseded by model {self._requested!r}"),
                                  f"model swap to {model!r} cancelled")
                return
            old = group.swap(step, self._on_rollback)
        self._events.swapped(old.cfg.model, model)

    def _on_rollback(self, failed: ModelStep, exc: BaseException) -> None:
        """The swapped-in model failed on its first real batch: the group put the old one back (batch's thread)."""
        current = self._running()
        self._events.warn(exc, f"model {failed.cfg.model!r} failed on real frames: rolled back to {current!r}")
        self._show(None, current)

    def _show(self, generation: int | None, model: str) -> None:
        """Show ``model`` as running, unless a newer request (``generation``) came since. None: from the batch's
        thread, which must not wait for the lock (a swap holds it to wait for batches)."""
        with self._lock if generation is not None else contextlib.nullcontext():
            if generation is not None and generation != self._generation:
                return
            self._events.show_running(model)
