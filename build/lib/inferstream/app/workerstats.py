"""What the supervisor of ``--workers`` adds to the run's numbers: the workers' batch stats merged into one,
per-worker health in the Prometheus text, and each worker's line in the summary."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from inferstream.app.metrics import metric_lines

if TYPE_CHECKING:
    from inferstream.app.workers import _Worker


def merge_batches(stats: Sequence[dict[str, float]]) -> dict[str, float]:
    """Several batch-groups' stats (pyinfer's ``stats``) as one: counts summed, means weighted by what they
    average over (fill and wait per frame; infer time and its stages, ``mean-<stage>-ms``, per batch)."""
    batches = sum(s.get("batches", 0) for s in stats)
    frames = sum(s.get("frames", 0) for s in stats)
    if not batches:
        return {}
    wait = sum(s.get("mean-wait-ms", 0.0) * s.get("frames", 0) for s in stats)
    per_batch = [k for k in dict.fromkeys(k for s in stats for k in s) if k.endswith("-ms") and k != "mean-wait-ms"]
    return {"batches": batches, "frames": frames, "mean-fill": round(frames / batches, 3),
            "mean-wait-ms": round(wait / max(frames, 1), 3),
            **{k: round(sum(s.get(k, 0.0) * s.get("batches", 0) for s in stats) / batches, 3) for k in per_batch}}


def worker_metrics(workers: Sequence[_Worker], order: Sequence[str]) -> str:
    """Per-worker health: up, restarts, failed, its batch fill, and which worker runs each stream. In cluster
    mode each worker's rows also carry the Ray node it runs on (``node``)."""
    lab = [(f'{{worker="{w.index}"' + (f',node="{w.node}"' if w.node else "") + "}", w) for w in workers]
    fill = [(lb, w.snap.batch["mean-fill"]) for lb, w in lab if w.snap and "mean-fill" in w.snap.batch]
    where = {sid: w.index for w in workers for sid in w.ids}
    return "\n".join([
        *metric_lines("worker_up", "gauge", "1 while the worker process runs",
                      [(lb, float(not w.ended and w.proc is not None and w.proc.poll() is None)) for lb, w in lab]),
        *metric_lines("worker_restarts_total", "counter", "Times the worker was restarted after dying",
                      [(lb, w.restarts) for lb, w in lab]),
        *metric_lines("worker_failed", "gauge", "1 when the worker died for good (its streams failed)",
                      [(lb, float(bool(w.failed))) for lb, w in lab]),
        *metric_lines("worker_batch_fill_mean", "gauge", "Mean frames per batch of the worker's batch-group", fill),
        *metric_lines("stream_worker", "gauge", "The worker that runs the stream",
                      [(f'{{stream="{sid}"}}', where[sid]) for sid in order]),
    ]) + "\n"


def health(w: _Worker) -> str:
    """The summary's word on a worker: ok, or how often it died and was restarted, and why."""
    if not w.causes and not w.fatal:
        return f"{w.where} ok"
    causes = [*w.causes, *([f"failed: {w.fatal}"] if w.fatal else [])]
    return f"{w.where} died {len(w.causes)}x, restarted {w.restarts}x ({'; '.join(causes)})"
