"""The batch sizes a model server warms its model up for, as workers register: on a GPU the CUDA graphs its
forwards will replay, captured before any forward needs them (a capture delays every worker's start)."""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inferstream.backends.base import Backend


class Warmer:
    """Remembers, per input size, the batch sizes already warmed up for (and the registered batch sizes' greatest
    common divisor: forwards are sums of its multiples)."""

    def __init__(self, backend: Backend, max_batch: int, every_sum: bool) -> None:
        self.backend, self.max_batch, self.every_sum = backend, max_batch, every_sum
        self._warm: dict[tuple[int, int], set[int]] = {}  # (height, width): the batch sizes warmed up for
        self._granule = 0

    def warm_up(self, capacity: int, height: int, width: int) -> str | None:
        """Warm the model up for the forwards that requests of ``capacity`` frames make; on a GPU, a note of what
        was captured and how long it took (None: nothing new, or the CPU).

        On a GPU: up to ``max_batch`` (or ``capacity`` when larger), which captures the graphs of the powers of two
        below it and of itself; with ``every_sum``, every sum of whole requests too (``request_sums``), so that no
        forward needs a larger graph padded or several. On the CPU one batch of ``capacity`` readies the lazy
        parts: there is no graph to capture, and a dummy forward of ``max_batch`` frames would only hold every
        worker's start for its duration."""
        from inferstream.backends.cuda_graphs import request_sums

        on_gpu = self.backend.device.type == "cuda"
        top = max(capacity, self.max_batch) if on_gpu else capacity
        self._granule = math.gcd(self._granule, capacity)
        warm = self._warm.setdefault((height, width), set())
        if self.every_sum and on_gpu:
            sizes = [n for n in request_sums(self._granule, top) if n not in warm]
        else:
            sizes = [] if any(n >= top for n in warm) else [top]
        started = time.monotonic()
        for n in sizes:
            self.backend.warmup(n, (height, width))
            warm.add(n)
        if not sizes or not on_gpu:
            return None
        status = getattr(self.backend, "graph_status", "no CUDA graphs")
        return (f"warmed up for batches of {', '.join(map(str, sizes))} at {height}x{width} in "
                f"{time.monotonic() - started:.1f} s ({status})")
