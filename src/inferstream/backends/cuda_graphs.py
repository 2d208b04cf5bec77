"""CUDA graphs of a torch model, one per input shape: one launch per batch instead of hundreds.

``TorchBackend.warmup`` captures the batch buckets
(``graph_buckets``); a batch of n frames replays the smallest captured bucket >= n, padded (the outputs are sliced
back to n rows). A capture that fails is reported (``status``) and, unless strict, leaves the model eager.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, Final

import torch
from torch import Tensor

from inferstream.backends.torch_module import flatten_outputs
from inferstream.errors import BackendInitError

MAX_GRAPHS: Final = 16  # captured shapes per backend; further shapes run eager


def graph_buckets(batch_size: int) -> list[int]:
    """Batch sizes captured for ``batch_size``: the powers of two below it, and itself (``8 -> [1, 2, 4, 8]``,
    ``12 -> [1, 2, 4, 8, 12]``); a batch runs on the smallest bucket that holds it."""
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


class _Captured:
    """One captured forward: its static input, graph and static outputs."""

    __slots__ = ("graph", "input", "outputs", "sliceable")

    def __init__(self, graph: torch.cuda.CUDAGraph, static_input: Tensor, outputs: list[Tensor]) -> None:
        self.graph, self.input, self.outputs = graph, static_input, outputs
        # padding a smaller batch into this graph is only right when every output is batch-first
        self.sliceable = all(o.ndim > 0 and o.shape[0] == static_input.shape[0] for o in outputs)


class CudaGraphs:
    """CUDA graphs of one model keyed by input shape ``(B, H, W)``, sharing one memory pool.

    The pool is shared because replays never overlap and every caller consumes the outputs before the next call
    (a replay may reuse memory that held another graph's outputs).
    """

    def __init__(self, model: Callable[[Tensor], Any], device: torch.device, dtype: torch.dtype,
                 strict: bool, memory_format: torch.memory_format = torch.contiguous_format) -> None:
        """``memory_format``: the static inputs' layout (the model's); a replay's copy into it converts a batch."""
        self._model, self._device, self._dtype, self._strict = model, device, dtype, strict
        self._memory_format = memory_format
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[tuple[int, int, int], _Captured] = {}
        self.failure: str | None = None

    @property
    def status(self) -> str:
        if self.failure is not None:
            return f"eager: capture failed ({self.failure})"
        return f"cuda-graph ({len(self._graphs)} captured: {sorted(self._graphs)})"

    def prepare(self, batch: int, size_hw: tuple[int, int]) -> None:
        """Capture the graph of ``(batch, *size_hw)`` unless it exists or capturing was given up."""
        key = (batch, *size_hw)
        if key not in self._graphs and self.failure is None:
            self._capture(key)

    def run(self, x: Tensor) -> list[Tensor] | None:
        """Replay the graph that fits ``x`` (``Tensor[B, 3, H, W]``, model dtype), capturing one if needed.

        Returns:
            The outputs (first dimension sliced to B when the batch was padded), or None: run eager.
        """
        b, _, h, w = x.shape
        fits = [k for k, c in self._graphs.items() if k[1:] == (h, w) and (k[0] == b or k[0] > b and c.sliceable)]
        if not fits:
            if self.failure is not None or len(self._graphs) >= MAX_GRAPHS:
                return None
            captured = self._capture((b, h, w))
            if captured is None:
                return None
            key = (b, h, w)
        else:
            key = min(fits)
        cap = self._graphs[key]
        cap.input[:b].copy_(x)
        cap.graph.replay()
        return cap.outputs if key[0] == b else [o[:b] for o in cap.outputs]

    def _capture(self, key: tuple[int, int, int]) -> _Captured | None:
        static = torch.zeros((key[0], 3, key[1], key[2]), dtype=self._dtype, device=self._device).contiguous(
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
            captured = self._graphs[key] = _Captured(graph, static, outputs)
            return captured
        reason = f"batch {key[0]} at {key[1]}x{key[2]}: {' / '.join(errors)}"
        if self._strict:
            raise BackendInitError(f"CUDA graph capture failed for {reason} (graph=auto runs such models eager)")
        self.failure = reason
        self._graphs.clear()
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

