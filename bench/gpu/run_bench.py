#!/usr/bin/env python3
"""GPU path benchmark: NVDEC -> CUDA memory -> batched zero-copy pyinfer, against the raw model ceiling.

Run on the GPU machine after provisioning (bench/gpu/run.sh does both), or here as a CPU dry run:

    python bench/gpu/run_bench.py --out DIR                                   # the H200 run
    python bench/gpu/run_bench.py --out DIR --dry-run                         # CPU: avdec_h264, tiny sizes

Phases (each guarded: a failing phase is recorded and the next one runs; results.json is rewritten after each):
  env          GPU, driver, torch, GStreamer
  clips        1080p H.264 made there: videotestsrc (moving SMPTE) ! x264enc ultrafast ! mp4 (the H200 has no NVENC)
  ceiling      the backend alone on a ready fp16 batch (same precision and CUDA-graph mode as the pipeline), per
               batch size; eager for reference; the Detector alone (NV12 frames already on the GPU -> detections
               on the host: preprocess + model + decode + copy) = what the pipeline could reach without GStreamer
  decode       nvh264dec ! fakesink for N streams: the NVDEC ceiling
  pipelines    N streams of filesrc ! qtdemux ! h264parse ! nvh264dec ! [cudadownload !] pyinfer ! pytracker !
               fakesink, one batch-group, batch-size min(N, 32): frames/s (steady state, 10 %..90 % of the frames),
               ratio to the ceiling at that batch size, GPU and NVDEC utilisation (NVML), host CPU, GIL wait
  bytes        host<->device copies measured with the torch profiler (CUPTI sees GStreamer's copies too), per frame
  profile      where time goes at N=32 (stage timers with device syncs), and variants (batch 16, no tracker)
  correctness  the CUDA path vs the CPU path on the same decoded frames, fp32 both (TF32 off)
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import Gst  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / ".gpu-carry" / "models" / "yolo11s-random.torchscript"
FRAMES_PER_CLIP = 300
MAX_BATCH = 32


# --------------------------------------------------------------------------------------------------------------
# measurement helpers
# --------------------------------------------------------------------------------------------------------------
class Nvml:
    """GPU and NVDEC utilisation through libnvidia-ml (ctypes); inert where there is no NVIDIA driver."""

    class _Util(ctypes.Structure):
        _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]

    def __init__(self) -> None:
        self.lib: Any = None
        self.handle = ctypes.c_void_p()
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0 and lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)) == 0:
                self.lib = lib
        except OSError:
            pass

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

    def __enter__(self) -> Sampler:
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
        for (t0, f0), (t1, f1) in zip(samples, samples[1:]):
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


# --------------------------------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.dry = args.dry_run
        self.device = "cpu" if self.dry else "cuda"
        self.decoder = "avdec_h264" if self.dry else "nvh264dec"
        # the same decoded bytes in system memory (avdec_h264 gives I420; nvh264dec NV12 in CUDA memory)
        self.to_system = "videoconvert ! video/x-raw,format=I420" if self.dry else \
            "cudadownload ! video/x-raw,format=NV12"
        self.model = str(args.model)
        self.frames = args.frames
        self.nvml = Nvml()
        self.results: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "dry_run": self.dry,
                                        "args": {k: str(v) for k, v in vars(args).items()}, "phases": {}}
        self.t0 = time.perf_counter()
        self.tmp = Path(tempfile.mkdtemp(prefix="inferstream-bench-"))
        self.clip = self.tmp / "clip.mp4"
        self.short_clip = self.tmp / "short.mp4"
        self.mid_clip = self.tmp / "mid.mp4"  # profile runs: fewer frames per stream

    # --- bookkeeping ------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    def phase(self, name: str, fn: Callable[[], Any]) -> None:
        t = time.perf_counter()
        print(f"[{self.elapsed():6.1f} s] {name} ...", flush=True)
        try:
            self.results["phases"][name] = fn()
        except Exception as exc:  # noqa: BLE001 (record and go on: a partial run still reports)
            traceback.print_exc()
            self.results["phases"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        self.results.setdefault("phase_s", {})[name] = round(time.perf_counter() - t, 1)
        print(f"[{self.elapsed():6.1f} s] {name}: {json.dumps(self.results['phases'][name], default=str)[:1500]}",
              flush=True)
        self.save()

    def over_budget(self, reserve_s: float = 0.0) -> bool:
        return self.elapsed() > self.args.budget_s - reserve_s

    # --- phases -----------------------------------------------------------------------------------------------
    def env(self) -> dict[str, Any]:
        import torch

        info: dict[str, Any] = {"gstreamer": Gst.version_string(), "torch": torch.__version__,
                                "python": sys.version.split()[0], "cuda_runtime": torch.version.cuda,
                                **self.nvml.info()}
        if torch.cuda.is_available():
            info["torch_device"] = torch.cuda.get_device_name(0)
        with contextlib.suppress(Exception):
            import torchvision

            info["torchvision"] = torchvision.__version__
        meta = {"config.txt": ""}
        torch.jit.load(self.model, map_location="cpu", _extra_files=meta)
        info["model"] = {"file": Path(self.model).name, "bytes": Path(self.model).stat().st_size,
                         **json.loads(meta["config.txt"]).get("inferstream", {})}
        return info

    def clips(self) -> dict[str, Any]:
        w, h = self.args.size
        out = {}
        for path, n in ((self.clip, self.frames), (self.short_clip, self.args.check_frames),
                        (self.mid_clip, self.args.profile_frames)):
            t = time.perf_counter()
            desc = (f"videotestsrc pattern=smpte horizontal-speed=7 num-buffers={n} ! "
                    f"video/x-raw,format=I420,width={w},height={h},framerate=30/1 ! x264enc speed-preset=ultrafast "
                    f"tune=zerolatency bitrate=8000 key-int-max=60 ! h264parse ! mp4mux ! filesink location={path}")
            res = run_pipeline(desc, timeout_s=120)
            if "error" in res:
                raise RuntimeError(f"encoding {path.name} failed: {res['error']}")
            out[path.name] = {"frames": n, "bytes": path.stat().st_size, "encode_s": round(time.perf_counter() - t, 2)}
        return out

    def ceiling(self) -> dict[str, Any]:
        import torch

        from inferstream.backends.loader import load_backend

        out: dict[str, Any] = {}
        batches = self.args.ceiling_batches or sorted({min(n, MAX_BATCH) for n in self.args.streams})
        for graph in ("auto", "off") if not self.args.ceiling_batches else ("auto",):
            for b in batches if graph == "auto" else batches[-1:]:
                backend = load_backend(self.model, device=self.device, precision=self.args.precision, graph=graph)
                backend.warmup(b, (640, 640))
                x = torch.rand((b, 3, 640, 640), device=backend.device).to(backend.dtype)
                rates = []
                for _ in range(self.args.ceiling_reps):
                    iters = max(3, min(50, int(self.args.ceiling_frames / b)))
                    _sync()
                    t = time.perf_counter()
                    for _ in range(iters):
                        backend(x)
                    _sync()
                    rates.append(b * iters / (time.perf_counter() - t))
                key = f"b{b}" + ("" if graph == "auto" else "-eager")
                out[key] = {"img_s": round(statistics.median(rates), 1), "graph": getattr(backend, "graph_status", "?"),
                            "dtype": str(backend.dtype)}
                backend.close()
        if not self.args.ceiling_batches:
            out["detector"] = self._detector_ceiling(batches[-1])
        return out

    def detector_profile(self) -> dict[str, Any]:
        """Where Detector.infer's time goes at batch 32 (device-synchronised stage timers), next to its rate."""
        res = self._detector_ceiling(MAX_BATCH)
        timers = StageTimers(sync=not self.dry)
        with timers.installed():
            timed = self._detector_ceiling(MAX_BATCH, timers=timers)
        res["timed_img_s"] = timed["img_s"]
        res["stages"] = timers.report({"frames": timed["frames"], "wall_s": timed["wall_s"]})
        return res

    def _detector_ceiling(self, b: int, timers: StageTimers | None = None) -> dict[str, Any]:
        """Detector.infer on b decoded NV12 frames already in device memory: the pipeline minus GStreamer."""
        import torch

        from inferstream.frames.raw import RawFrame
        from inferstream.inference import Detector, InferConfig

        decoded = self._decoded(min(b, 8))
        dev = torch.device(self.device)
        frames = []
        for i in range(b):
            fmt, planes = decoded[i % len(decoded)]
            planes = tuple(p.to(dev) for p in planes)
            frames.append(RawFrame(fmt, planes[0].shape[1], planes[0].shape[0], planes, "bt601", False))
        det = Detector(InferConfig(model=self.model, device=self.device, precision=self.args.precision))
        det.warmup(b)
        for _ in range(3):
            dets = det.infer(frames)
        _sync()
        reps = max(3, int(self.args.ceiling_frames / b))
        if timers is not None:
            timers.armed = True
        t = time.perf_counter()
        for _ in range(reps):
            dets = det.infer(frames)
        wall = time.perf_counter() - t
        rate = b * reps / wall
        res = {"batch": b, "img_s": round(rate, 1), "dets_per_frame": round(sum(len(d) for d in dets) / b, 1),
               "graph": getattr(det.backend, "graph_status", "?"), "frames": b * reps, "wall_s": round(wall, 3)}
        det.close()
        return res

    def _decoded(self, n: int) -> list[tuple[str, tuple[Any, ...]]]:
        """n decoded frames of the clip: (format, planes as uint8 CPU tensors)."""
        import torch
        gi.require_version("GstVideo", "1.0")
        from gi.repository import GstVideo

        from inferstream.frames.system import mapped_frame

        desc = (f"filesrc location={self.clip} ! qtdemux ! h264parse ! {self.decoder} ! {self.to_system} ! "
                "appsink name=s sync=false")
        pipeline = Gst.parse_launch(desc)
        sink = pipeline.get_by_name("s")
        pipeline.set_state(Gst.State.PLAYING)
        planes = []
        try:
            for _ in range(n):
                sample = sink.emit("try-pull-sample", 10 * Gst.SECOND)
                if sample is None:  # end of a short clip
                    break
                info = GstVideo.VideoInfo.new_from_caps(sample.get_caps())
                with mapped_frame(sample.get_buffer(), info) as frame:
                    planes.append((frame.format, tuple(torch.as_tensor(p).clone() for p in frame.planes)))
        finally:
            pipeline.set_state(Gst.State.NULL)
        if not planes:
            raise RuntimeError("no decoded frame from the clip")
        return planes

    def _streams_desc(self, n: int, *, download: bool, batch: int, group: str, tracker: bool = True,
                      infer: bool = True, extra: str = "", clip: Path | None = None) -> str:
        parts = []
        for i in range(n):
            chain = [f"filesrc location={clip or self.clip}", "qtdemux", "h264parse", self.decoder]
            if download:
                chain.append(self.to_system)
            if infer:
                chain.append(f"pyinfer name=inf{i} model={self.model} device={self.device} "
                             f"precision={self.args.precision} batch-group={group} batch-size={batch} {extra}")
                if tracker:
                    chain.append("pytracker")
            chain.append(f"fakesink name=sink{i} sync=false")
            parts.append(" ! ".join(chain))
        return "  ".join(parts)

    def decode(self) -> dict[str, Any]:
        out = {}
        for n in [n for n in self.args.streams if n >= 16]:
            with Sampler(self.nvml) as sampler:
                t0 = time.perf_counter()
                res = run_pipeline(self._streams_desc(n, download=False, batch=1, group="-", infer=False),
                                   timeout_s=self.args.pipeline_timeout_s)
                if "preroll_s" in res:  # NVDEC busy from the first buffers to EOS
                    res.update(sampler.window(t0 + res["preroll_s"], time.perf_counter()))
            res["fps_incl_startup"] = round(n * self.frames / res["wall_s"], 1)
            if res.get("after_preroll_s"):
                res["fps_after_preroll"] = round(n * (self.frames - 1) / res["after_preroll_s"], 1)
            out[f"n{n}"] = res
        return out

    def pipelines(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        stalled: set[tuple[bool, bool]] = set()
        for n, download, batch_arg, tracker in self._sweep():
            key = f"n{n}-{'download' if download else 'cuda'}" + (f"-b{batch_arg}" if batch_arg else "") + \
                ("" if tracker else "-notrack")
            if self.over_budget(reserve_s=self.args.reserve_s):
                out[key] = {"skipped": "time budget"}
                continue
            if (download, tracker) in stalled:
                out[key] = {"skipped": "fewer streams already timed out"}
                continue
            batch = batch_arg or min(n, MAX_BATCH)
            clip, per_stream = (self.mid_clip, self.args.profile_frames) if self.args.sweep_clip == "mid" else \
                (self.clip, self.frames)
            desc = self._streams_desc(n, download=download, batch=batch, group=key, clip=clip,
                                      tracker=tracker)
            with Sampler(self.nvml) as sampler:
                res = run_pipeline(desc, timeout_s=self.args.pipeline_timeout_s, counter="inf0",
                                   total=n * per_stream, sampler=sampler)
            res.update(streams=n, batch=batch, memory="system (cudadownload)" if download else "CUDA",
                       tracker=tracker, frames_per_stream=per_stream)
            if "timeout" in str(res.get("error")):
                stalled.add((download, tracker))
            out[key] = res
            print(f"    {key}: {json.dumps(res)}", flush=True)
        return out

    def _sweep(self) -> list[tuple[int, bool, int | None, bool]]:
        """(streams, through cudadownload, batch or None, with pytracker) from --sweep
        "32,32:download,32:b16,32:notrack", else N x both memories."""
        tracker = not self.args.no_tracker
        if not self.args.sweep:
            return [(n, d, None, tracker) for n in self.args.streams for d in (False, True)]
        out = []
        for item in self.args.sweep.split(","):
            n, *opts = item.split(":")
            batch = next((int(o[1:]) for o in opts if o.startswith("b")), None)
            out.append((int(n), "download" in opts, batch, tracker and "notrack" not in opts))
        return out

    def bytes_per_frame(self) -> dict[str, Any]:
        """Host<->device bytes per frame, measured with the torch profiler over a short run of each path."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        out: dict[str, Any] = {}
        if self.dry:
            return {"skipped": "CPU dry run"}
        n = 4
        for download in (False, True):
            key = "download" if download else "cuda"
            desc = self._streams_desc(n, download=download, batch=n, group=f"bytes-{key}", clip=self.mid_clip)
            trace = self.tmp / f"trace-{key}.json"
            prof = profile(activities=[ProfilerActivity.CUDA])
            res = run_pipeline(desc, timeout_s=60, counter="inf0", total=n * self.args.profile_frames,
                               on_first_frames=prof.start)  # model loading and warm-up stay out
            torch.cuda.synchronize()
            prof.stop()
            prof.export_chrome_trace(str(trace))
            events = json.loads(trace.read_text()).get("traceEvents", [])
            totals: dict[str, int] = defaultdict(int)
            counts: dict[str, int] = defaultdict(int)
            for ev in events:
                if ev.get("cat") == "gpu_memcpy":
                    name = ev.get("name", "")
                    kind = "HtoD" if "HtoD" in name else "DtoH" if "DtoH" in name else "DtoD" if "DtoD" in name else name
                    totals[kind] += int(ev.get("args", {}).get("bytes", 0))
                    counts[kind] += 1
            frames = res.get("frames", 0) - res.get("first_frames_at", 0)
            if frames <= 0:
                raise RuntimeError(f"no frames profiled: {res}")
            out[key] = {"frames": frames, "error": res.get("error"),
                        "bytes_per_frame": {k: round(v / frames) for k, v in totals.items()},
                        "copies_per_frame": {k: round(v / frames, 2) for k, v in counts.items()}}
        return out

    def profile(self) -> dict[str, Any]:
        """Stage timers (device-synchronised) at N=32, and variants that each take one cost away."""
        swept = self.results["phases"].get("pipelines", {})
        done = [v["streams"] for k, v in swept.items() if k.endswith("-cuda") and v.get("fps") and not v.get("partial")]
        n = max([m for m in done if m <= 32], default=min(self.args.streams))  # the profile must finish in time
        frames = n * self.args.profile_frames
        batch = min(n, MAX_BATCH)
        out: dict[str, Any] = {}
        timers = StageTimers(sync=not self.dry)
        with timers.installed(), Sampler(self.nvml) as sampler:
            res = run_pipeline(self._streams_desc(n, download=False, batch=batch, group="prof", clip=self.mid_clip),
                               timeout_s=self.args.pipeline_timeout_s, counter="inf0", total=frames, sampler=sampler)
        res["stages"] = timers.report(res)
        out[f"n{n}-timed"] = res
        variants: dict[str, tuple[dict[str, Any], float | None]] = {
            f"n{n}-plain": ({"batch": batch}, None),
            f"n{n}-batch{max(n // 2, 1)}": ({"batch": max(n // 2, 1)}, None),
            f"n{n}-no-tracker": ({"batch": batch, "tracker": False}, None),
            f"n{n}-no-detections": ({"batch": batch, "extra": "confidence-threshold=0.999"}, None),
            f"n{n}-switch-interval-0.5ms": ({"batch": batch}, 0.0005),
        }
        for key, (kw, interval) in variants.items():
            if self.over_budget(reserve_s=self.args.reserve_s):
                out[key] = {"skipped": "time budget"}
                continue
            old = sys.getswitchinterval()
            if interval is not None:
                sys.setswitchinterval(interval)
            try:
                with Sampler(self.nvml) as sampler:
                    out[key] = run_pipeline(self._streams_desc(n, download=False, group=key, clip=self.mid_clip, **kw),
                                            timeout_s=self.args.pipeline_timeout_s, counter="inf0", total=frames,
                                            sampler=sampler)
            finally:
                sys.setswitchinterval(old)
            print(f"    {key}: {json.dumps(out[key])}", flush=True)
        return out

    def correctness(self) -> dict[str, Any]:
        """Same decoded frames through the CUDA path (device=cuda, CUDA memory) and the CPU path, both fp32.

        Three checks, from pixels to boxes: the model inputs the two paths build (colour conversion + letterbox:
        the CUDA default is the fast resize-then-convert path, a few levels off the CPU's exact one), the raw model outputs on them (relative error: float32 on two devices, TF32 off),
        and the detections (per frame, matched by label, box and score).
        """
        import torch

        from inferstream.backends.torch_backend import TorchBackend
        from inferstream.meta.gstanalytics import read_detections
        from inferstream.ops import letterbox

        saved_flags = _strict_fp32()
        seen: dict[str, dict[int, Any]] = {"gpu": {}, "gpuexact": {}, "cpu": {}}
        inputs: dict[str, list[Any]] = defaultdict(list)
        outputs: dict[str, list[Any]] = defaultdict(list)
        memory: dict[str, str] = {}
        recording = {"on": False}

        def probe(name: str) -> Callable[..., Gst.PadProbeReturn]:
            def fn(pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
                buf = info.get_buffer()
                meta = read_detections(buf)
                memory.setdefault(name, pad.get_current_caps().to_string())
                seen[name][buf.pts] = meta.dets if meta is not None else None
                return Gst.PadProbeReturn.OK
            return fn

        def attach(pipeline: Gst.Pipeline) -> None:
            for name in seen:
                pipeline.get_by_name(name).get_static_pad("sink").add_probe(
                    Gst.PadProbeType.BUFFER, lambda *_: (recording.__setitem__("on", True), Gst.PadProbeReturn.OK)[1])
                pipeline.get_by_name(name).get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, probe(name))

        orig_pre, orig_call = letterbox.preprocess_batch, TorchBackend.__call__

        def pre(frames: Any, size: Any, device: Any, dtype: Any, exact: bool | None = None) -> Any:
            batch, lb = orig_pre(frames, size, device, dtype, exact=exact)
            if recording["on"] and not exact:  # the default path of each device (the GPU's exact branch aside)
                inputs[torch.device(device).type].append(batch.cpu().clone())
            return batch, lb

        def call(backend: Any, batch: Any) -> Any:
            out = orig_call(backend, batch)
            if recording["on"]:
                outputs[backend.device.type].append(out[0].float().cpu().clone())
            return out

        model, clip = self.args.check_model, self.args.check_clip
        if not (model.is_file() and clip.is_file()):  # make_check_inputs.py was not run: the bench model and clip
            model, clip = self.model, self.short_clip
        common = f"model={model} precision=fp32 batch-size=1"
        desc = (f"filesrc location={clip} ! qtdemux ! h264parse ! {self.decoder} ! tee name=t "
                f"t. ! queue ! pyinfer name=gpu device={self.device} batch-group=check-gpu {common} ! fakesink "
                f"t. ! queue ! pyinfer name=gpuexact device={self.device} batch-group=check-gpuexact preprocess=exact "
                f"{common} ! fakesink "
                f"t. ! queue ! {self.to_system} ! pyinfer name=cpu device=cpu batch-group=check-cpu {common} "
                f"! fakesink")
        letterbox.preprocess_batch, TorchBackend.__call__ = pre, call
        try:
            res = run_pipeline(desc, timeout_s=120, before_play=attach)
        finally:
            letterbox.preprocess_batch, TorchBackend.__call__ = orig_pre, orig_call
            _restore_fp32(saved_flags)
        res["caps"] = memory
        res["model"], res["clip"] = model.name, clip.name
        dev = "cpu" if self.dry else "cuda"
        if inputs[dev] and inputs["cpu"] and not self.dry:
            pairs = list(zip(inputs[dev], inputs["cpu"]))
            res["inputs_compared"] = len(pairs)
            res["input_max_abs_diff"] = max(float((a - b).abs().max()) for a, b in pairs)
            outs = list(zip(outputs[dev], outputs["cpu"]))
            res["model_output_rel_err"] = max(float((a - b).norm() / b.norm()) for a, b in outs) if outs else None
        res.update(compare_detections(seen["gpu"], seen["cpu"]))
        res["preprocess_exact_on_gpu"] = compare_detections(seen["gpuexact"], seen["cpu"])
        return res

    def run(self) -> int:
        wanted = self.args.phases.split(",") if self.args.phases else \
            ["env", "clips", "correctness", "ceiling", "decode", "pipelines", "profile", "bytes"]
        for name in wanted:
            if name == "decode" and self.dry:
                continue
            if name in ("profile", "bytes", "detector_profile") and self.over_budget(reserve_s=10):
                self.results["phases"][name] = {"skipped": "time budget"}
                continue
            self.phase(name, getattr(self, name if name != "bytes" else "bytes_per_frame"))
        self.results["total_s"] = round(self.elapsed(), 1)
        self.save()
        table = markdown(self.results)
        (self.out / "gpu.md").write_text(table)
        print(table)
        return 0


# --------------------------------------------------------------------------------------------------------------
# profile: stage timers installed by monkeypatching (bench only; product code is unchanged)
# --------------------------------------------------------------------------------------------------------------
class StageTimers:
    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.total: dict[str, float] = defaultdict(float)
        self.count: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()
        self.armed = False  # set by the first frame: model loading, warm-up and graph capture are not counted

    def add(self, name: str, dt: float) -> None:
        if not self.armed:
            return
        with self.lock:
            self.total[name] += dt
            self.count[name] += 1

    def timed(self, name: str, fn: Callable[..., Any], sync: bool = False) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if name.startswith("thread: BatchGroup"):
                self.armed = True
            if sync:
                _sync()
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if sync:
                    _sync()
                self.add(name, time.perf_counter() - t)
        return wrapper

    def timed_map(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @contextlib.contextmanager
        def wrapper(*args: Any, **kwargs: Any) -> Iterator[Any]:
            t = time.perf_counter()
            cm = fn(*args, **kwargs)
            frame = cm.__enter__()
            self.add("thread: map enter", time.perf_counter() - t)
            try:
                yield frame
            except BaseException:
                if not cm.__exit__(*sys.exc_info()):
                    raise
            else:
                t = time.perf_counter()
                cm.__exit__(None, None, None)
                self.add("thread: map exit", time.perf_counter() - t)
        return wrapper

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        import inferstream.frames.cuda as fcuda
        import inferstream.frames.system as fsystem
        import inferstream.meta.gstanalytics as meta
        from inferstream import inference
        from inferstream.backends.torch_backend import TorchBackend
        from inferstream.batching import BatchGroup
        from inferstream.models import yolo
        from inferstream.models.yolo import AnchorFreeDecoder
        from inferstream.ops import letterbox
        from inferstream.tracking.bytetrack import ByteTrack

        s = self.sync
        patches = [
            (letterbox, "preprocess_batch", lambda f: self.timed("leader: preprocess (colour+letterbox)", f, s)),
            (letterbox, "to_rgb_nchw", lambda f: self.timed("leader: - colour conversion (to_rgb_nchw)", f, s)),
            (letterbox, "_resize", lambda f: self.timed("leader: - resize (cv2-exact bilinear)", f, s)),
            (letterbox, "resize_rgb_into", lambda f: self.timed("leader: - fast resize + colour (CUDA)", f, s)),
            (yolo, "nms_xyxy", lambda f: self.timed("leader: - NMS (torchvision, batched)", f, s)),
            (TorchBackend, "__call__", lambda f: self.timed("leader: model forward", f, s)),
            (AnchorFreeDecoder, "flat", lambda f: self.timed("leader: decode + NMS", f, s)),
            (inference, "to_host", lambda f: self.timed("leader: detections to host", f, s)),
            (inference.Detector, "infer", lambda f: self.timed("leader: Detector.infer total", f, s)),
            (BatchGroup, "infer", lambda f: self.timed("thread: BatchGroup.infer (wait + share of batch)", f)),
            (fcuda, "mapped_cuda_frames", self.timed_map),
            (fsystem, "mapped_frame", self.timed_map),
            (meta, "write_detections", lambda f: self.timed("thread: write_detections", f)),
            (meta, "read_detections", lambda f: self.timed("thread: read_detections (tracker)", f)),
            (meta, "write_tracks", lambda f: self.timed("thread: write_tracks", f)),
            (ByteTrack, "update", lambda f: self.timed("thread: ByteTrack.update", f)),
        ]
        saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
        for obj, name, make in patches:
            setattr(obj, name, make(getattr(obj, name)))
        try:
            yield
        finally:
            for obj, name, orig in saved:
                setattr(obj, name, orig)

    def report(self, res: dict[str, Any]) -> dict[str, Any]:
        frames = max(int(res.get("frames", 0)), 1)
        wall = res.get("wall_s", 1.0)
        out = {}
        for name in sorted(self.total):
            out[name] = {"calls": self.count[name], "ms_per_call": round(1e3 * self.total[name] / self.count[name], 3),
                         "us_per_frame": round(1e6 * self.total[name] / frames, 1),
                         "share_of_wall": round(self.total[name] / wall, 3)}
        return out


# --------------------------------------------------------------------------------------------------------------
# comparison and report
# --------------------------------------------------------------------------------------------------------------
def compare_detections(gpu: dict[int, Any], cpu: dict[int, Any]) -> dict[str, Any]:
    """Per frame (by pts): same count, and every detection matched (same label, box edges within 1 px after
    rounding to whole pixels, score within 1e-3), greedily by score; also counted within 4 px and 1e-2."""
    strict = _match(gpu, cpu, box_px=1.0, score=1e-3)
    loose = _match(gpu, cpu, box_px=4.0, score=1e-2)
    strict["matched_within_4px_1e-2"] = loose["matched"]
    # the fast CUDA preprocessing is a few levels off the exact path: judge it at 4 px / 1e-2 (90 % of detections)
    strict["ok_within_4px"] = bool(strict["detections"]) and loose["matched"] >= 0.9 * strict["detections"]
    return strict


def _match(gpu: dict[int, Any], cpu: dict[int, Any], box_px: float, score: float) -> dict[str, Any]:
    import torch

    frames = sorted(set(gpu) & set(cpu))
    matched = total = count_mismatch = 0
    max_box = max_score = 0.0
    for pts in frames:
        g, c = gpu[pts], cpu[pts]
        ng, nc = (len(g) if g is not None else 0), (len(c) if c is not None else 0)
        total += max(ng, nc)
        if ng != nc:
            count_mismatch += 1
        if not ng or not nc:
            continue
        used = torch.zeros(nc, dtype=torch.bool)
        for i in torch.argsort(g.scores, descending=True).tolist():
            d = (g.boxes_xyxy[i] - c.boxes_xyxy).abs().amax(dim=1)
            d[used | (c.labels != g.labels[i])] = float("inf")
            j = int(torch.argmin(d))
            if float(d[j]) <= box_px and abs(float(g.scores[i] - c.scores[j])) <= score:
                used[j] = True
                matched += 1
                max_box = max(max_box, float(d[j]))
                max_score = max(max_score, abs(float(g.scores[i] - c.scores[j])))
    return {"frames_compared": len(frames), "frames_gpu": len(gpu), "frames_cpu": len(cpu),
            "detections": total, "matched": matched, "frames_with_count_mismatch": count_mismatch,
            "max_box_diff_px": round(max_box, 3), "max_score_diff": round(max_score, 6),
            "dets_per_frame": round(total / max(len(frames), 1), 1),
            "ok": bool(frames) and len(frames) == len(gpu) == len(cpu) and matched >= 0.99 * total and total > 0}


def markdown(results: dict[str, Any]) -> str:
    ph = results["phases"]
    env, ceil, pipes = ph.get("env", {}), ph.get("ceiling", {}), ph.get("pipelines", {})
    lines = [f"Run {results['started']}: {env.get('gpu', env.get('torch_device', 'CPU dry run'))}, driver "
             f"{env.get('driver', '-')}, GStreamer {env.get('gstreamer', '?')}, torch {env.get('torch', '?')} "
             f"(CUDA {env.get('cuda_runtime', '-')}), Python {env.get('python', '?')}", ""]
    lines += ["| streams | batch | memory into pyinfer | pytracker | frames/s | ceiling at batch (img/s) | ratio | "
              "GPU util | NVDEC util | host CPU (cores) | GIL wait p90 (ms) | mean fill |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in pipes.items():
        if "streams" not in r:
            lines.append(f"| {key} | | | | {r.get('skipped', r.get('error', '?'))} | | | | | | | |")
            continue
        c = ceil.get(f"b{r['batch']}", {}).get("img_s")
        negotiated = "CUDA memory" if "CUDAMemory" in str(r.get("caps")) else "system memory"
        memory = negotiated + (" (cudadownload)" if "download" in key else "")
        fps = r.get("fps")
        ratio = f"{100 * fps / c:.0f} %" if fps and c else "-"
        fill = r.get("batch_stats", {}).get("mean-fill", "-")
        fps_text = (f"{fps}" + (" (partial: timed out)" if r.get("partial") else "")) if fps else r.get("error", "-")
        lines.append(f"| {r['streams']} | {r['batch']} | {memory} | {'yes' if r.get('tracker', True) else 'no'} | "
                     f"{fps_text} | "
                     f"{c or '-'} | {ratio} | {r.get('gpu_util_pct', '-')} % | {r.get('nvdec_util_pct', '-')} % | "
                     f"{r.get('cpu_cores', '-')} | {r.get('gil_wait_ms_p90', '-')} | {fill} |")
    lines.append("")
    if ceil:
        lines.append("Ceilings (img/s): " + ", ".join(
            f"{k} {v.get('img_s')}" + (f" ({v.get('graph', '')[:10]})" if k.startswith("b") else "")
            for k, v in ceil.items() if isinstance(v, dict) and "img_s" in v)
            + f"; detector = Detector.infer on decoded frames already on the device, "
              f"{ceil.get('detector', {}).get('dets_per_frame', '?')} detections/frame")
    if (dec := ph.get("decode")) and isinstance(dec, dict):
        lines.append("NVDEC alone (nvh264dec ! fakesink, incl. start-up): " + ", ".join(
            f"{k} {v.get('fps_incl_startup')} frames/s" for k, v in dec.items() if isinstance(v, dict)))
    if (chk := ph.get("correctness")) and isinstance(chk, dict):
        lines.append(f"Correctness (CUDA path vs CPU path, fp32, {chk.get('model')} on {chk.get('clip')}): "
                     f"ok (1 px, 1e-3)={chk.get('ok')}, ok (4 px, 1e-2)={chk.get('ok_within_4px')}, "
                     f"{chk.get('matched')}/"
                     f"{chk.get('detections')} detections matched over {chk.get('frames_compared')} frames, max box "
                     f"diff {chk.get('max_box_diff_px')} px, max score diff {chk.get('max_score_diff')}; "
                     f"{chk.get('matched_within_4px_1e-2')} within 4 px / 1e-2; model inputs max abs diff "
                     f"{chk.get('input_max_abs_diff')} over {chk.get('inputs_compared')} frames; raw output rel. "
                     f"err {chk.get('model_output_rel_err')}"
                     + (f", error: {chk['error']}" if chk.get("error") else ""))
        if isinstance(ex := chk.get("preprocess_exact_on_gpu"), dict):
            lines.append(f"Correctness with preprocess=exact on the GPU: ok={ex.get('ok')}, {ex.get('matched')}/"
                         f"{ex.get('detections')} matched (1 px, 1e-3), {ex.get('matched_within_4px_1e-2')} within "
                         f"4 px / 1e-2, max box diff {ex.get('max_box_diff_px')} px")
    if (byt := ph.get("bytes")) and isinstance(byt, dict):
        lines.append("Host<->device bytes per frame (torch profiler / CUPTI): " + "; ".join(
            f"{k}: {v.get('bytes_per_frame')} in {v.get('copies_per_frame')} copies" for k, v in byt.items()
            if isinstance(v, dict)))
    if (dp := ph.get("detector_profile")) and isinstance(dp, dict) and dp.get("stages"):
        lines += ["", f"Detector.infer alone at batch {dp.get('batch')}: {dp.get('img_s')} img/s "
                  f"({dp.get('timed_img_s')} with the stage timers' device syncs), {dp.get('dets_per_frame')} "
                  "detections/frame", "", "| Detector stage (device-synchronised) | calls | ms/call |",
                  "|---|---|---|"]
        lines += [f"| {k} | {v['calls']} | {v['ms_per_call']} |" for k, v in dp["stages"].items()]
    if (prof := ph.get("profile")) and isinstance(prof, dict):
        lines += ["", "| profile run | frames/s | GPU util | GIL wait p90 (ms) | host CPU | mean fill |",
                  "|---|---|---|---|---|---|"]
        for k, v in prof.items():
            lines.append(f"| {k} | {v.get('fps', v.get('skipped', v.get('error', '-')))} | "
                         f"{v.get('gpu_util_pct', '-')} % | {v.get('gil_wait_ms_p90', '-')} | {v.get('cpu_cores', '-')} | "
                         f"{v.get('batch_stats', {}).get('mean-fill', '-')} |")
        stages = next((v.get("stages") for v in prof.values() if isinstance(v, dict) and v.get("stages")), None)
        if stages:
            lines += ["", "| stage (timed run, device-synchronised) | calls | ms/call | µs/frame | share of wall |",
                      "|---|---|---|---|---|"]
            lines += [f"| {k} | {v['calls']} | {v['ms_per_call']} | {v['us_per_frame']} | {v['share_of_wall']} |"
                      for k, v in stages.items()]
    return "\n".join(lines) + "\n"


def _strict_fp32() -> dict[str, Any]:
    """TF32 off for convolutions and matmuls (both the legacy flags and torch >= 2.9's fp32_precision)."""
    import torch

    saved: dict[str, Any] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    for name, obj in (("conv_precision", getattr(torch.backends.cudnn, "conv", None)),
                      ("matmul_precision", torch.backends.cuda.matmul)):
        if obj is not None and hasattr(obj, "fp32_precision"):
            with contextlib.suppress(Exception):
                saved[name] = obj.fp32_precision
                obj.fp32_precision = "ieee"
    return saved


def _restore_fp32(saved: dict[str, Any]) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved["matmul"], saved["cudnn"]
    for name, obj in (("conv_precision", getattr(torch.backends.cudnn, "conv", None)),
                      ("matmul_precision", torch.backends.cuda.matmul)):
        if name in saved:
            with contextlib.suppress(Exception):
                obj.fp32_precision = saved[name]


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16, 32, 64])
    ap.add_argument("--frames", type=int, default=FRAMES_PER_CLIP, help="frames per clip (per stream)")
    ap.add_argument("--check-frames", type=int, default=12, help="frames in the correctness / bytes clip")
    ap.add_argument("--profile-frames", type=int, default=120, help="frames per stream in the profile runs")
    ap.add_argument("--size", type=lambda s: tuple(int(x) for x in s.split("x")), default=(1920, 1080))
    ap.add_argument("--check-model", type=Path, default=ROOT / ".gpu-carry" / "models" / "person-yolov8s.torchscript",
                    help="correctness check: a trained detector (make_check_inputs.py)")
    ap.add_argument("--check-clip", type=Path, default=ROOT / ".gpu-carry" / "clips" / "vtest-h264.mp4",
                    help="correctness check: real video as H.264 (make_check_inputs.py)")
    ap.add_argument("--precision", default=None, help="default fp16 (fp32 with --dry-run)")
    ap.add_argument("--ceiling-frames", type=int, default=1600, help="images per ceiling repetition")
    ap.add_argument("--ceiling-reps", type=int, default=3)
    ap.add_argument("--pipeline-timeout-s", type=float, default=45)
    ap.add_argument("--budget-s", type=float, default=400, help="skip optional work after this long")
    ap.add_argument("--reserve-s", type=float, default=30)
    ap.add_argument("--phases", default="", help="comma-separated subset, in order (default: all); also "
                    "detector_profile")
    ap.add_argument("--sweep", default="", help='pipelines to run: "16,32,32:download,32:b16" (default: every '
                    "--streams value, CUDA and cudadownload)")
    ap.add_argument("--sweep-clip", choices=("full", "mid"), default="full")
    ap.add_argument("--no-tracker", action="store_true", help="pipelines without pytracker")
    ap.add_argument("--ceiling-batches", type=lambda s: [int(x) for x in s.split(",")], default=None)
    ap.add_argument("--dry-run", action="store_true", help="CPU: avdec_h264, device=cpu (tiny sizes advised)")
    args = ap.parse_args()
    args.precision = args.precision or ("fp32" if args.dry_run else "fp16")
    Gst.init(None)
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())
