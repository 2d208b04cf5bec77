"""The bench's bare model graph: one CUDA graph of a module on a static batch, and its replay rate (torch only, so
``graph_gap.py`` runs without GStreamer; ``app_workers.bare_ceiling`` uses the same two steps)."""
from __future__ import annotations

import statistics
import time
from typing import Any


def capture(model: Any, x: Any, pool: Any = None) -> tuple[Any, Any]:
    """``model(x)`` captured as one graph after three warm-up calls on a side stream (lazy init, cuDNN's choice,
    TorchScript's profiling), inside ``inference_mode``: ``(graph, outputs)``. ``pool``: a shared memory pool,
    captured thread-locally as ``CudaGraphs`` does."""
    import torch

    stream = torch.cuda.Stream()
    with torch.inference_mode():
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        mode = {"pool": pool, "capture_error_mode": "thread_local"} if pool is not None else {}
        with torch.cuda.graph(graph, **mode):
            outputs = model(x)
    return graph, outputs


def replay_rate(graph: Any, b: int, reps: int = 5) -> float:
    """img/s of back-to-back replays of ``graph`` of ``b`` images (median of ``reps`` timings of ``1600 // b``)."""
    import torch

    rates = []
    for _ in range(reps):
        iters = max(5, 1600 // b)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(iters):
            graph.replay()
        torch.cuda.synchronize()
        rates.append(b * iters / (time.perf_counter() - t))
    return statistics.median(rates)
