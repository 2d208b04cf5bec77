"""Measuring a GStreamer pipeline on the GPU machine: NVML sampling, GIL latency, steady-state frame rate."""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any, Self

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst


class Nvml:
    """GPU and NVDEC utilisation through libnvidia-ml (ctypes); inert where there is no NVIDIA driver."""

    class _Util(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    def __init__(self) -> None:
        self.lib: Any = None
        self.handle = ctypes.c_void_p()
        with contextlib.suppress(OSError):  # no NVIDIA driver: stays inert
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0 and lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)) == 0:
                self.lib = lib

    def _text(self, fn: str, *args: Any) -> str:
        buf = ctypes.create_string_buffer(128)
        return buf.value.decode() if getattr(self.lib, fn)(*args, buf, 128) == 0 else "?"

    def info(self) -> dict[str, str]:
        if self.lib is None:
            return {}
        return {"gpu": self._text("nvmlDeviceGetName", self.handle), "driver": self._text("nvmlSystemGetDriverVersion")}

    def sample(self) -> tuple[int, int] | None:
        """(GPU %, NVDEC %) over the driver's last sample period."""
        if self.lib is None:
            return None
        util, dec, period = self._Util(), ctypes.c_uint(), ctypes.c_uint()
        self.lib.nvmlDeviceGetUtilizationRates(self.handle, ctypes.byref(util))
        self.lib.nvmlDeviceGetDecoderUtilization(self.handle, ctypes.byref(dec), ctypes.byref(period))
        return int(util.gpu), int(dec.value)


class Sampler:
    """Background sampling while a pipeline runs: NVML utilisation, and GIL wait (how late a 2 ms sleep wakes)."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml, self.util, self.gil_excess = nvml, [], []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._nvml_loop, daemon=True),
                         threading.Thread(target=self._gil_loop, daemon=True)]

    def __enter__(self) -> Self:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(1)

    def _nvml_loop(self) -> None:
        while not self._stop.wait(0.1):
            if (s := self.nvml.sample()) is not None:
                self.util.append((time.perf_counter(), *s))

    def _gil_loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.perf_counter()
            time.sleep(0.002)
            self.gil_excess.append((t0, time.perf_counter() - t0 - 0.002))

    def window(self, t0: float, t1: float) -> dict[str, float]:
        util = [(g, d) for t, g, d in self.util if t0 <= t <= t1]
        gil = sorted(e for t, e in self.gil_excess if t0 <= t <= t1)
        out: dict[str, float] = {}
        if util:
            out["gpu_util_pct"] = round(statistics.mean(g for g, _ in util), 1)
            out["nvdec_util_pct"] = round(statistics.mean(d for _, d in util), 1)
        if gil:
            out["gil_wait_ms_median"] = round(1e3 * gil[len(gil) // 2], 3)
            out["gil_wait_ms_p90"] = round(1e3 * gil[int(len(gil) * 0.9)], 3)
        return out


def steady_rate(samples: list[tuple[float, int]], total: int) -> tuple[float, float, float]:
    """Frames/s between the moments 10 % and 90 % of ``total`` frames were done (interpolated), and those moments."""
    def when(target: float) -> float:
        for (t0, f0), (t1, f1) in pairwise(samples):
            if f1 >= target > f0 or (f1 >= target and f0 >= target):
                return t0 + (t1 - t0) * (target - f0) / max(f1 - f0, 1)
        return samples[-1][0]

    lo, hi = when(0.1 * total), when(0.9 * total)
    return (0.8 * total / (hi - lo) if hi > lo else 0.0), lo, hi


def run_pipeline(desc: str, *, timeout_s: float, counter: str | None = None, total: int = 0,
                 sampler: Sampler | None = None, before_play: Callable[[Gst.Pipeline], None] | None = None,
                 on_first_frames: Callable[[], None] | None = None) -> dict[str, Any]:
    """Play to EOS; with ``counter`` (a pyinfer name) poll its batch-group's frame count for the steady rate.

    ``preroll_s`` is when every sink had its first buffer (ASYNC_DONE); ``on_first_frames`` runs once the counter
    reports frames (the bytes phase starts its profiler there, after model loading).
    """
    pipeline = Gst.parse_launch(desc)
    if before_play:
        before_play(pipeline)
    bus = pipeline.get_bus()
    counter_el = pipeline.get_by_name(counter) if counter else None
    samples: list[tuple[float, int]] = []
    cpu0, t_start = os.times(), time.perf_counter()
    pipeline.set_state(Gst.State.PLAYING)
    result: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    kinds = Gst.MessageType.ERROR | Gst.MessageType.EOS | Gst.MessageType.ASYNC_DONE
    try:
        while True:
            msg = bus.timed_pop_filtered(50 * Gst.MSECOND, kinds)
            now = time.perf_counter()
            if counter_el is not None:
                stats = json.loads(counter_el.get_property("stats") or "{}")
                samples.append((now, int(stats.get("frames", 0))))
                if "caps" not in result and samples[-1][1] > 0:
                    caps = counter_el.get_static_pad("sink").get_current_caps()
                    result["caps"] = caps.to_string().split(",")[0] if caps else None
                    if on_first_frames is not None:
                        on_first_frames()
                        result["first_frames_at"] = samples[-1][1]
            if msg is not None:
                if msg.type == Gst.MessageType.ASYNC_DONE:
                    result.setdefault("preroll_s", round(now - t_start, 3))
                    continue
                if msg.type == Gst.MessageType.ERROR:
                    err, dbg = msg.parse_error()
                    result["error"] = f"{err.message} | {dbg}"
                break
            if now - t_start > timeout_s:
                result["error"] = f"timeout after {timeout_s} s"
                break
    finally:
        pipeline.set_state(Gst.State.NULL)
    end = time.perf_counter()
    wall = end - t_start
    cpu1 = os.times()
    result.update(wall_s=round(wall, 3),
                  cpu_cores=round((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall, 2))
    if "preroll_s" in result:
        result["after_preroll_s"] = round(end - t_start - result["preroll_s"], 3)
    if counter_el is not None and samples:
        done = samples[-1][1]
        result["frames"] = done
        result["batch_stats"] = stats
        if done >= 0.9 * total > 0:
            fps, lo, hi = steady_rate(samples, total)
        else:  # stopped early: the rate over what ran after the first 10 % of the frames that were done
            fps, lo, hi = steady_rate(samples, done) if done > 10 else (0.0, 0.0, 0.0)
            result["partial"] = True
        if fps:
            result["fps"] = round(fps, 1)
            if sampler is not None:
                result.update(sampler.window(lo, hi))
    return result
