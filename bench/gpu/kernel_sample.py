"""Device time per kernel in every process of an app run, sampled at once: ``app_workers.py --kernels S``.

The GPU machine has no Nsight Systems, so each process samples itself with torch's profiler (CUPTI, CUDA
activity only): the bench's ``sitecustomize`` calls :func:`arm` in every Python process of the run; a thread waits
for the bench to create the file ``BENCH_KERNELS_GO`` (once a quarter of the frames are done), records S seconds,
and writes ``ROLE-PID.json`` into ``BENCH_KERNELS_OUT`` (ROLE: the script or module the process runs, e.g.
``model_server``, ``worker``). :func:`summarise` adds them up per role: device ms per second of wall time (the
share of one GPU that role's kernels took; under MPS they overlap) and the kernels that took the most.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

POLL_S = 0.05


def arm() -> None:
    """Start the waiting thread (from ``sitecustomize``; a no-op unless ``BENCH_KERNELS_GO`` is set)."""
    go = os.environ.get("BENCH_KERNELS_GO")
    if go:
        seconds = float(os.environ.get("BENCH_KERNELS_S", "2"))
        out = Path(os.environ["BENCH_KERNELS_OUT"])
        threading.Thread(target=_wait_and_sample, args=(Path(go), seconds, out), daemon=True,
                         name="bench-kernel-sample").start()


def _wait_and_sample(go: Path, seconds: float, out: Path) -> None:
    while not go.exists():
        time.sleep(POLL_S)
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return  # this process runs nothing on the GPU
    from torch.profiler import ProfilerActivity, profile

    role = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "python"
    started = time.perf_counter()
    rows: list[list[Any]] = []
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            time.sleep(seconds)
        wall = time.perf_counter() - started
        for event in prof.key_averages():
            device_us = getattr(event, "self_device_time_total", None)
            if device_us is None:
                device_us = getattr(event, "self_cuda_time_total", 0)
            if device_us:
                rows.append([event.key, float(device_us), int(event.count)])
        result: dict[str, Any] = {"role": role, "wall_s": wall, "kernels": rows}
    except Exception as exc:  # noqa: BLE001 (a bench probe: the run goes on, the file says why)
        result = {"role": role, "wall_s": 1.0, "kernels": [], "error": f"{type(exc).__name__}: {exc}"}
    (out / f"{role}-{os.getpid()}.json").write_text(json.dumps(result))


def summarise(folder: Path) -> dict[str, Any]:
    """Per role: processes, device ms per wall second (all its processes together) and the top kernels."""
    per: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        role = per.setdefault(data["role"], {"processes": 0, "device_ms_per_s": 0.0, "_kernels": collections.Counter()})
        role["processes"] += 1
        if "error" in data:
            role["error"] = data["error"]
        total_us = sum(us for _, us, _ in data["kernels"])
        role["device_ms_per_s"] += total_us / 1e3 / data["wall_s"]
        for name, us, _ in data["kernels"]:
            role["_kernels"][name[:70]] += us / 1e3 / data["wall_s"]
    for role in per.values():
        role["device_ms_per_s"] = round(role["device_ms_per_s"], 1)
        role["top_ms_per_s"] = {k: round(v, 2) for k, v in role.pop("_kernels").most_common(12)}
    return per
