#!/usr/bin/env python3
"""GPU path benchmark: NVDEC -> CUDA memory -> batched zero-copy pyinfer, against the raw model ceiling.

Run on the GPU machine after provisioning (bench/gpu/run.sh does both), or here as a CPU dry run:

    python bench/gpu/run_bench.py --out DIR                                   # the H200 run
    python bench/gpu/run_bench.py --out DIR --dry-run                         # CPU: avdec_h264, tiny sizes

Phases (each guarded: a failing phase is recorded and the next one runs; results.json is rewritten after each):
  env          GPU, driver, torch, GStreamer
  clips        1080p H.264 made there: videotestsrc (moving SMPTE) ! x264enc ultrafast ! mp4 (the H200 has no NVENC)
  ceiling      the backend alone on a ready fp16 batch (same precision and CUDA-graph mode as the pipeline), per
               batch size; eager for reference; the ModelStep alone (NV12 frames already on the GPU -> detections
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
import json
import statistics
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from correctness import check_correctness
from gi.repository import Gst
from measure import Nvml, Sampler, run_pipeline
from report import markdown
from stages import StageTimers, sync_device

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / ".gpu-carry" / "models" / "yolo11s-random.torchscript"
FRAMES_PER_CLIP = 300
MAX_BATCH = 32


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
        except Exception as exc:  # noqa: BLE001
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
                    sync_device()
                    t = time.perf_counter()
                    for _ in range(iters):
                        backend(x)
                    sync_device()
                    rates.append(b * iters / (time.perf_counter() - t))
                key = f"b{b}" + ("" if graph == "auto" else "-eager")
                out[key] = {"img_s": round(statistics.median(rates), 1), "graph": getattr(backend, "graph_status", "?"),
                            "dtype": str(backend.dtype)}
                backend.close()
        if not self.args.ceiling_batches:
            out["detector"] = self._detector_ceiling(batches[-1])
        return out

    def detector_profile(self) -> dict[str, Any]:
        """Where ModelStep.infer's time goes at batch 32 (device-synchronised stage timers), next to its rate."""
        res = self._detector_ceiling(MAX_BATCH)
        timers = StageTimers(sync=not self.dry)
        with timers.installed():
            timed = self._detector_ceiling(MAX_BATCH, timers=timers)
        res["timed_img_s"] = timed["img_s"]
        res["stages"] = timers.report({"frames": timed["frames"], "wall_s": timed["wall_s"]})
        return res

    def _detector_ceiling(self, b: int, timers: StageTimers | None = None) -> dict[str, Any]:
        """ModelStep.infer on b decoded NV12 frames already in device memory: the pipeline minus GStreamer."""
        import torch

        from inferstream.inference import InferConfig, ModelStep
        from inferstream.rawframe import RawFrame

        decoded = self._decoded(min(b, 8))
        dev = torch.device(self.device)
        frames = []
        for i in range(b):
            fmt, planes = decoded[i % len(decoded)]
            planes = tuple(p.to(dev) for p in planes)
            frames.append(RawFrame(fmt, planes[0].shape[1], planes[0].shape[0], planes, "bt601", False))
        det = ModelStep(InferConfig(model=self.model, device=self.device, precision=self.args.precision))
        det.warmup(b)
        for _ in range(3):
            dets = det.infer(frames)
        sync_device()
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
                      infer: bool = True, extra: str = "", clip: Path | None = None, tracker_opts: str = "") -> str:
        parts = []
        for i in range(n):
            chain = [f"filesrc location={clip or self.clip}", "qtdemux", "h264parse", self.decoder]
            if download:
                chain.append(self.to_system)
            if infer:
                chain.append(f"pyinfer name=inf{i} model={self.model} device={self.device} "
                             f"precision={self.args.precision} batch-group={group} batch-size={batch} {extra}")
                if tracker:
                    chain.append(f"pytracker {tracker_opts}".strip())
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
        stalled: dict[tuple[bool, bool, bool], int] = {}  # (download, tracker, in_stream) -> fewest streams timed out
        for n, download, batch_arg, tracker, in_stream in self._sweep():
            key = f"n{n}-{'download' if download else 'cuda'}" + (f"-b{batch_arg}" if batch_arg else "") + \
                ("" if tracker else "-notrack") + ("-instream" if in_stream else "")
            if self.over_budget(reserve_s=self.args.reserve_s):
                out[key] = {"skipped": "time budget"}
                continue
            kind = (download, tracker, in_stream)
            if n >= stalled.get(kind, n + 1):
                out[key] = {"skipped": "as many streams or fewer already timed out"}
                continue
            batch = batch_arg or min(n, MAX_BATCH)
            clip, per_stream = (self.mid_clip, self.args.profile_frames) if self.args.sweep_clip == "mid" else \
                (self.clip, self.frames)
            desc = self._streams_desc(n, download=download, batch=batch, group=key, clip=clip,
                                      tracker=tracker, tracker_opts="track-in-batch=false" if in_stream else "")
            with Sampler(self.nvml) as sampler:
                res = run_pipeline(desc, timeout_s=self.args.pipeline_timeout_s, counter="inf0",
                                   total=n * per_stream, sampler=sampler)
            res.update(streams=n, batch=batch, memory="system (cudadownload)" if download else "CUDA",
                       tracker=tracker and ("in its thread" if in_stream else "in the batch"),
                       frames_per_stream=per_stream)
            if "timeout" in str(res.get("error")):
                stalled[kind] = min(n, stalled.get(kind, n))
            out[key] = res
            print(f"    {key}: {json.dumps(res)}", flush=True)
        return out

    def _sweep(self) -> list[tuple[int, bool, int | None, bool, bool]]:
        """(streams, through cudadownload, batch or None, with pytracker, pytracker in its own thread) from
        --sweep "32,32:download,32:b16,32:notrack,32:instream", else N x both memories."""
        tracker = not self.args.no_tracker
        if not self.args.sweep:
            return [(n, d, None, tracker, False) for n in self.args.streams for d in (False, True)]
        out = []
        for item in self.args.sweep.split(","):
            n, *opts = item.split(":")
            batch = next((int(o[1:]) for o in opts if o.startswith("b")), None)
            out.append((int(n), "download" in opts, batch, tracker and "notrack" not in opts, "instream" in opts))
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
                    kind = next((k for k in ("HtoD", "DtoH", "DtoD") if k in name), name)
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
        """The CUDA path against the CPU path on the same decoded frames (``correctness.check_correctness``)."""
        return check_correctness(self)

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
