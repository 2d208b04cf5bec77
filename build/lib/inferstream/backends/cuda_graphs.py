"""CUDA graphs of a torch model, one per input shape: one launch per batch instead of hundreds.

``TorchBackend.warmup`` captures the batch buckets (``graph_buckets``), and each capture times its replay. A batch
of n frames runs on the cheapest cover of n by the captured graphs, by those times (``cheapest_cover``): the
smallest bucket >= n, padded (the outputs sliced back to n rows), or several buckets summing to n, replayed one
after the other (24 frames as 16 + 8 rather than 32 padded by a third). A capture that fails is reported
(``status``) and, unless strict, leaves the model eager.
"""
from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable
from typing import Any, Final

import torch
from torch import Tensor

from inferstream.backends.torch_module import flatten_outputs
from inferstream.errors import BackendInitError

MAX_GRAPHS: Final = 16  # captured shapes per backend; further shapes run eager
REPLAY_OVERHEAD_MS: Final = 0.05  # a further replay's own cost (its launch, the copies in and out): splits must gain more


def graph_buckets(batch_size: int) -> list[int]:
    """Batch sizes captured for ``batch_size``: the powers of two below it, and itself (``8 -> [1, 2, 4, 8]``,
    ``12 -> [1, 2, 4, 8, 12]``); a batch runs on the cheapest cover by them (``cheapest_cover``)."""
    if batch_size < 1:
        raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
    buckets = [1 << i for i in range(batch_size.bit_length()) if 1 << i < batch_size]
    return [*buckets, batch_size]


def request_sums(granule: int, max_batch: int, most: int = 12) -> list[int]:
    """Batch sizes a model server captures when requests come in ``granule`` frames: every sum of whole requests
    up to ``max_batch`` (``8, 64 -> [8, 16, 24, ..., 64]``), so that three requests of 8 run a graph of 24, not
    one of 32 padded by a third. At most ``most`` sizes (a step of several requests past that, each capture
    costing start-up time and graph memory), and ``max_batch`` itself."""
    if granule < 1 or max_batch < 1:
        raise ValueError(f"granule and max_batch: expected >= 1, got {granule}, {max_batch}")
    step = granule * math.ceil(max_batch / (granule * most))
    sizes = list(range(step, max_batch + 1, step))
    return sizes if sizes and sizes[-1] == max_batch else [*sizes, max_batch]


def cheapest_cover(n: int, costs: dict[int, float], overhead: float = REPLAY_OVERHEAD_MS) -> list[int]:
    """The batch sizes whose graphs run ``n`` frames most cheaply, largest first: one graph of at least ``n``
    (padded), or several whose sizes add up to ``n`` (the last one padded if that is cheaper). ``costs``: each
    captured size's replay time; every replay past the first adds ``overhead``. Empty when no cover exists."""
    best: list[tuple[float, list[int]]] = [(0.0, [])]  # best[m]: the cheapest cover of m frames
    for m in range(1, n + 1):
        options = [(cost, [k]) for k, cost in costs.items() if k >= m]
        options += [(best[m - k][0] + cost + overhead, sorted([k, *best[m - k][1]], reverse=True))
                    for k, cost in costs.items() if k < m and best[m - k][1]]
        best.append(min(options, key=lambda o: (o[0], len(o[1])), default=(math.inf, [])))
    return best[n][1]


def split_rows(n: int, sizes: list[int]) -> list[tuple[int, int, int]]:
    """The rows of an ``n``-frame batch each graph of a cover runs: ``(size, first row, rows)``, the last one
    padded when the sizes add up to more than ``n``."""
    parts, start = [], 0
    for size in sizes:
        rows = min(size, n - start)
        if rows <= 0:
            break
        parts.append((size, start, rows))
        start += rows
    return parts


class _Captured:
    """One captured forward: its static input, graph, static outputs and replay time."""

    __slots__ = ("graph", "input", "ms", "outputs", "sliceable")

    def __init__(self, graph: torch.cuda.CUDAGraph, static_input: Tensor, outputs: list[Tensor], ms: float) -> None:
        self.graph, self.input, self.outputs, self.ms = graph, static_input, outputs, ms
        # padding a smaller batch into this graph is only right when every output is batch-first
        self.sliceable = all(o.ndim > 0 and o.shape[0] == static_input.shape[0] for o in outputs)


class CudaGraphs:
    """CUDA graphs of one model keyed by input shape ``(B, H, W)``, sharing one memory pool.

    The pool is shared because replays never overlap and every caller consumes the outputs before the next call
    (a replay may reuse memory that held another graph's outputs); a batch split over several graphs copies each
    one's outputs out before the next one replays.
    """

    def __init__(self, model: Callable[[Tensor], Any], device: torch.device, dtype: torch.dtype,
                 strict: bool, memory_format: torch.memory_format = torch.contiguous_format) -> None:
        """``memory_format``: the static inputs' layout (the model's); a replay's copy into it converts a batch."""
        self._model, self._device, self._dtype, self._strict = model, device, dtype, strict
        self._memory_format = memory_format
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[tuple[int, int, int], _Captured] = {}
        self._plans: dict[tuple[int, int, int], list[int]] = {}  # (B, H, W): its cheapest cover, until a capture
        self.failure: str | None = None

    @property
    def status(self) -> str:
        if self.failure is not None:
            return f"eager: capture failed ({self.failure})"
        replays = ", ".join(f"{b}x{h}x{w} {self._graphs[b, h, w].ms:.2f} ms" for b, h, w in sorted(self._graphs))
        return f"cuda-graph ({len(self._graphs)} captured, replay times: {replays})"

    def prepare(self, batch: int, size_hw: tuple[int, int]) -> None:
        """Capture the graph of ``(batch, *size_hw)`` unless it exists or capturing was given up."""
        key = (batch, *size_hw)
        if key not in self._graphs and self.failure is None:
            self._capture(key)

    def run(self, x: Tensor) -> list[Tensor] | None:
        """Replay the graphs that cover ``x`` (``Tensor[B, 3, H, W]``, model dtype) most cheaply, capturing one if
        none is as large.

        Returns:
            The outputs (first dimension sliced to B when the batch was padded; new tensors when several graphs
            ran), or None: run eager.
        """
        b, _, h, w = x.shape
        sizes = self._plans.get((b, h, w)) or self._plan(b, h, w)
        if not sizes:  # no graph as large: capture this shape
            if self.failure is not None or len(self._graphs) >= MAX_GRAPHS or self._capture((b, h, w)) is None:
                return None
            sizes = [b]
        if len(sizes) == 1:
            cap = self._graphs[sizes[0], h, w]
            cap.input[:b].copy_(x)
            cap.graph.replay()
            return cap.outputs if sizes[0] == b else [o[:b] for o in cap.outputs]
        results: list[Tensor] = []
        # the graphs share a memory pool: each one's outputs are copied out before the next one replays
        for size, start, rows in split_rows(b, sizes):
            cap = self._graphs[size, h, w]
            cap.input[:rows].copy_(x[start:start + rows])
            cap.graph.replay()
            if not results:
                results = [torch.empty((b, *o.shape[1:]), dtype=o.dtype, device=o.device) for o in cap.outputs]
            for mine, out in zip(results, cap.outputs):
                mine[start:start + rows].copy_(out[:rows])
        return results

    def _plan(self, b: int, h: int, w: int) -> list[int]:
        """The cheapest cover of ``b`` frames at ``h`` x ``w`` (kept until the next capture): by any graphs when
        their outputs are all batch-first (so they can run part of a batch), else by the graph of exactly ``b``;
        empty when no graph is as large as ``b``."""
        graphs = {k[0]: c for k, c in self._graphs.items() if k[1:] == (h, w)}
        if not any(k >= b for k in graphs):
            return []
        if all(c.sliceable for c in graphs.values()):
            plan = cheapest_cover(b, {k: c.ms for k, c in graphs.items()})
        else:
            plan = [b] if b in graphs else []
        if plan:
            self._plans[b, h, w] = plan
        return plan

    def _capture(self, key: tuple[int, int, int]) -> _Captured | None:
        # random values, not zeros: on an H200 yolo11s ran 8 % slower on zeros than on frames (BENCHMARKS.md,
        # the fifteenth session), and the replay time said and planned with should be the frames'
        static = torch.rand((key[0], 3, key[1], key[2]), dtype=self._dtype, device=self._device).contiguous(
            memory_format=self._memory_format)
        errors = []
        # a TorchScript module is tried as the interpreter optimises it (fusion), then unoptimised
        modes = (True, False) if isinstance(self._model, torch.jit.ScriptModule) else (True,)
        for optimize in modes:
            try:
                with torch.jit.optimized_execution(optimize):  # type: ignore[attr-defined]
                    graph, outputs = self._record(static)
            except Exception as e:  # noqa: BLE001
                errors.append(f"{type(e).__name__}: {_last_line(e)}")
                _reset_rng_capture_state()
                continue
            captured = self._graphs[key] = _Captured(graph, static, outputs, _replay_ms(graph))
            self._plans.clear()  # a new graph may make another cover cheaper
            return captured
        reason = f"batch {key[0]} at {key[1]}x{key[2]}: {' / '.join(errors)}"
        if self._strict:
            raise BackendInitError(f"CUDA graph capture failed for {reason} (graph=auto runs such models eager)")
        self.failure = reason
        self._graphs.clear()
        self._plans.clear()
        return None

    def _record(self, static: Tensor) -> tuple[torch.cuda.CUDAGraph, list[Tensor]]:
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side):  # warm-up off the capture (lazy init, cuDNN choice, TorchScript profiling)
            for _ in range(3):
                self._model(static)
        torch.cuda.current_stream(self._device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = flatten_outputs(self._model(static))
        return graph, outputs


def _replay_ms(graph: torch.cuda.CUDAGraph, times: int = 3) -> float:
    """How long a replay of ``graph`` takes, timed on the device after one replay to warm it up: the shortest of
    ``times``, since other work on the GPU (another process capturing its graphs) only ever adds time."""
    graph.replay()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(times + 1)]
    marks[0].record()
    for mark in marks[1:]:
        graph.replay()
        mark.record()
    marks[-1].synchronize()
    return min(float(a.elapsed_time(b)) for a, b in itertools.pairwise(marks))


def _reset_rng_capture_state() -> None:
    """A capture that CUDA invalidated (a sync inside the model) ends without torch's capture epilogue, which
    leaves the CUDA RNG in capture mode ("Offset increment outside graph capture" on the next random op); an
    empty capture that ends cleanly resets it."""
    import warnings

    # best effort: eager inference does not need the RNG
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the CUDA Graph is empty"
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass  # the capture is the point: entering and leaving it resets the RNG's capture state


def _last_line(e: BaseException) -> str:
    """The cause of a TorchScript error is on its last line (the first says only that an operation failed)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "TorchScript interpreter" in lines[0]:
        return lines[-1]
    return lines[0] if lines else type(e).__name__

