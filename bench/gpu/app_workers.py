#!/usr/bin/env python3
"""``inferstream run --workers N`` on the GPU machine: the app itself, NVDEC -> pyinfer (CUDA memory) [-> pytracker],
against the bare model ceiling measured in the same call.

    python bench/gpu/app_workers.py --out DIR [--streams 64] [--workers 1,2,4,8] [--frames 450] [--mps off,on]
    python bench/gpu/app_workers.py --out DIR --runs 1:off:yes,8:on:yes --ab-old .gpu-carry/old/src

Runs after ``bench/gpu/provision.sh`` (``run.sh`` with ``APP_WORKERS=1`` does both). Phases:
  clips     a few distinct 1080p H.264 clips made there (x264enc; the H200 has no NVENC), shared by the streams
  ceiling   the bare TorchScript on a static fp16 input, one CUDA graph replayed (NCHW, channels_last, and channels_last
            with cuDNN autotuning), per batch
            size: what the model alone reaches, with no wrapper copies; on random values (the goal's ceiling) and,
            channels_last, on zeros, on the clips' own frames letterboxed, and on vtest's when carried (the
            GPU's speed depends on the values: the runs' frames have their own ceiling)
  runs      for each workers count, with and without pytracker: the app as a subprocess on a YAML config
            (decode: nvh264dec, infer.device: cuda, batch-size min(32, streams per worker), fakesink);
            frames/s from its Prometheus endpoint between 25 % and 90 % of the frames, GPU/NVDEC utilisation
            (NVML), host cores busy (the whole machine, /proc/stat); ``--mps off,on`` runs each with the app's
            ``--mps off`` and ``--mps on`` (the app's private CUDA MPS daemon: the workers' kernels share the GPU
            at once instead of time-slicing one CUDA context after another). ``--runs W:MPS:TRACKER,...`` names
            the runs instead of the product of ``--workers``, ``--mps`` and ``--tracker``; optional fields after
            them (``W`` = auto: the app's own ``--workers auto``): ``bN`` the batch size (e.g. half a worker's streams, so that two batches of a worker are in
            flight; ``bapp``: the app's own default), ``iN`` the app's ``infer.instances`` (model copies per worker,
            each its own batch-group), ``m`` the app's ``infer.model-server`` (one process runs the batches of
            every worker; ``dX`` its ``delay-ms``, ``xN`` its ``max-batch``; the table gives its frames per forward
            and the share of the time it spent in forwards, both between 25 % and 90 % of the frames; ``pb`` its
            ``mps-priority: below-normal``, ``pw`` its ``mps-priority: workers-below-normal``, ``ce`` its ``capture: every-sum``), ``o`` with ``--ab-old``: this run on the older tree only (with any
            ``o`` run, the others run on this tree only, not on both), ``fN`` pyinfer's ``in-flight`` (frames per stream in the group at
            once), ``gi`` pyinfer's ``graph: inductor`` (the model compiled by torch.compile; its bare ceiling is
            measured compiled too, and the table gives both ratios), ``sS`` every process's ``sys.setswitchinterval`` in seconds, through a
            ``sitecustomize`` of the bench's own (how long a thread that wants the GIL waits for a busy holder);
            ``--profile S`` records S seconds of one worker with ``py-spy --gil`` once a quarter of the frames are
            done (``NAME.gil.txt``, raw; samples / (rate x S) is how busy that worker's GIL was); ``--ab-old SRC`` runs
            each twice, the app importing ``SRC`` (an older tree's ``src/``) and this tree's, alternating the
            order run by run: code against code on one host, with one set of clips and one ceiling
``--kernels S`` has every process of each run record S seconds of its device time per kernel at a quarter of
the frames (``kernel_sample.py``: which share of the GPU the server's forwards and the workers' own kernels take).
``--nvdec-processes P`` (8 by default; 0: skip) first measures what NVDEC alone decodes of the streams, in P
processes into fakesinks (``nvdec_ceiling.py``); each run then says its share of that too.
Writes ``app_workers.json`` and ``app_workers.md`` into DIR.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_graph import capture, replay_rate
from measure import Nvml, Sampler, run_pipeline
from nvdec_ceiling import nvdec_ceiling

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / ".gpu-carry" / "models" / "yolo11s-random.torchscript"
_FRAMES = re.compile(r'^inferstream_frames_total\{stream="[^"]*"\} (\d+)', re.MULTILINE)
_SERVER = re.compile(r"^inferstream_model_server_(busy_seconds|device_seconds|frames|forwards|queued_forwards|requests"
                     r"|request_seconds|decodes|decode_seconds)_total "
                     r"(\S+)$", re.MULTILINE)


def make_clips(out: Path, count: int, frames: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = out / f"clip{i}.mp4"
        desc = (f"videotestsrc pattern=smpte horizontal-speed={5 + 2 * i} num-buffers={frames} ! "
                "video/x-raw,format=I420,width=1920,height=1080,framerate=30/1 ! x264enc speed-preset=ultrafast "
                f"tune=zerolatency bitrate=8000 key-int-max=60 ! h264parse ! mp4mux ! filesink location={path}")
        res = run_pipeline(desc, timeout_s=180)
        if "error" in res:
            raise RuntimeError(f"encoding {path.name} failed: {res['error']}")
        paths.append(path)
    return paths


def letterboxed_frames(clips: list[Path], count: int, size: int = 640) -> Any:
    """``count`` frames spread over ``clips`` (every 7th frame, round robin), letterboxed to ``size`` x ``size`` as
    the app does (RGB, aspect kept, grey 114 around, values in [0, 1]): the content the model sees in the runs,
    as ``Tensor[count, 3, size, size]`` on the CPU; None without OpenCV or frames."""
    try:
        import cv2
    except ImportError:
        return None
    import numpy as np
    import torch

    caps = [cv2.VideoCapture(str(c)) for c in clips]
    frames: list[Any] = []
    for step in itertools.count():
        if len(frames) >= count or step >= 7 * count:
            break
        cap = caps[step % len(caps)]
        for _ in range(7):
            ok, bgr = cap.read()
        if not ok:
            continue
        h, w = bgr.shape[:2]
        r = min(size / w, size / h)
        nw, nh = round(w * r), round(h * r)
        canvas = np.full((size, size, 3), 114, np.uint8)
        top, left = (size - nh) // 2, (size - nw) // 2
        canvas[top:top + nh, left:left + nw] = cv2.resize(bgr, (nw, nh), interpolation=cv2.INTER_LINEAR)[..., ::-1]
        frames.append(torch.from_numpy(canvas).permute(2, 0, 1).float() / 255)
    for cap in caps:
        cap.release()
    return torch.stack([frames[i % len(frames)] for i in range(count)]) if frames else None


def bare_ceiling(batches: list[int], contents: dict[str, Any] | None = None, reps: int = 5,
                 inductor: bool = False) -> dict[str, Any]:
    """img/s of one CUDA graph of the TorchScript on a static fp16 batch of uniform random values (median of
    ``reps`` timings): NCHW, channels_last, and channels_last with cuDNN's autotuning on (``autotune``: each
    convolution's algorithm timed before the capture instead of picked by heuristics; the app leaves it off).
    The channels_last graph is timed again on ``contents`` (name: ``Tensor[N, 3, 640, 640]`` on the CPU, e.g. the
    clips' frames letterboxed) and on zeros: the GPU's speed depends on the values it computes on
    (``graph_gap.py``), so the model's ceiling on the runs' own frames is not the one on random values. With
    ``inductor``, also the channels_last model compiled as pyinfer's ``graph=inductor`` compiles it."""
    import torch

    from inferstream.backends.compiled import InductorForward

    out: dict[str, Any] = {}
    for layout in ("nchw", "channels_last", "autotune", *(["inductor"] if inductor else [])):
        torch.backends.cudnn.benchmark = layout == "autotune"
        model = torch.jit.load(str(MODEL), map_location="cuda").half().eval()
        fmt = torch.contiguous_format if layout == "nchw" else torch.channels_last
        model = model.to(memory_format=fmt)
        if layout == "inductor":
            model = InductorForward(model)
        for b in batches:
            x = torch.rand((b, 3, 640, 640), device="cuda").half().contiguous(memory_format=fmt)
            graph, _ = capture(model, x)
            out[f"{layout}-b{b}"] = round(replay_rate(graph, b, reps), 1)
            if layout == "channels_last":
                inputs = {"zeros": torch.zeros(b, 3, 640, 640)}
                inputs.update({k: v[:b] for k, v in (contents or {}).items() if v is not None and len(v) >= b})
                for name, values in inputs.items():
                    x.copy_(values)  # into the graph's static input, as the app's frames are
                    out[f"{layout}-b{b}-{name}"] = round(replay_rate(graph, b, reps), 1)
            del graph
        del model
        torch.cuda.empty_cache()
    torch.backends.cudnn.benchmark = False
    return out


def rate_between(samples: list[tuple[float, int]], total: int, lo: float = 0.25,
                 hi: float = 0.9) -> tuple[float, float, float]:
    """Frames/s between the moments ``lo`` and ``hi`` of ``total`` were done (interpolated): workers start a few
    seconds apart (each loads the model and captures its graphs), so the window starts once all of them run."""
    def when(target: float) -> float:
        for (t0, f0), (t1, f1) in itertools.pairwise(samples):
            if f1 >= target:
                return t0 + (t1 - t0) * max(0.0, target - f0) / max(f1 - f0, 1)
        return samples[-1][0]

    t_lo, t_hi = when(lo * total), when(hi * total)
    return ((hi - lo) * total / (t_hi - t_lo) if t_hi > t_lo else 0.0), t_lo, t_hi


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> tuple[int, dict[str, float]] | None:
    """Frames done by every stream, and the model server's counters (busy_seconds, frames, forwards) if any."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
            text = r.read().decode()
    except OSError:
        return None
    return sum(int(v) for v in _FRAMES.findall(text)), {k: float(v) for k, v in _SERVER.findall(text)}


def server_window(samples: list[tuple[float, dict[str, float]]], lo: float, hi: float) -> dict[str, Any]:
    """How busy the model server was between ``lo`` and ``hi`` (its forwards' share of the time) and its frames per
    forward there: the steady state, without the start's warm-up batches."""
    window = [(t, c) for t, c in samples if lo <= t <= hi and "busy_seconds" in c]
    if len(window) < 2:
        return {}
    (t0, a), (t1, b) = window[0], window[-1]
    forwards = b.get("forwards", 0) - a.get("forwards", 0)
    device = b.get("device_seconds", 0) - a.get("device_seconds", 0)
    return {"server_busy": round((b["busy_seconds"] - a["busy_seconds"]) / (t1 - t0), 3),
            "server_device_busy": round(device / (t1 - t0), 3) if "device_seconds" in b else None,
            "server_device_ms_per_forward": round(1000 * device / forwards, 2) if forwards and device else None,
            "server_per_forward": round((b.get("frames", 0) - a.get("frames", 0)) / forwards, 2) if forwards else None,
            # the share of forwards launched behind a running one (the server's pipelining; absent on older trees)
            "server_queued": round((b["queued_forwards"] - a.get("queued_forwards", 0)) / forwards, 3)
            if forwards and "queued_forwards" in b else None,
            # a request's mean time at the server, arrival to answer (absent on older trees): against the workers'
            # "model" stage, how much of a round trip is the server's
            "server_request_ms": round(1000 * (b["request_seconds"] - a.get("request_seconds", 0)) / requests, 2)
            if (requests := b.get("requests", 0) - a.get("requests", 0)) else None,
            # the decoding thread's busy share and forwards per decoding call (absent on older trees): near 1 busy,
            # decoding bounds the run
            "server_decode_busy": round((b["decode_seconds"] - a.get("decode_seconds", 0)) / (t1 - t0), 3)
            if "decode_seconds" in b else None,
            "server_forwards_per_decode": round(forwards / decodes, 2)
            if (decodes := b.get("decodes", 0) - a.get("decodes", 0)) else None,
            "server_decode_ms": round(1000 * (b["decode_seconds"] - a.get("decode_seconds", 0)) / decodes, 2)
            if decodes else None}


def _busy_cpu_s() -> float:
    """CPU seconds the whole machine has been busy (every core: user + nice + system + irq + softirq)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (fields[0] + fields[1] + fields[2] + fields[5] + fields[6]) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (breadth first), from /proc's children lists."""
    found, todo = [], [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop(0)}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _worker_pid(app_pid: int, module: bytes = b"inferstream.app.worker") -> int | None:
    """One process of the app running ``module`` (a worker; the model server), or the app itself when it runs
    in process (None for another module)."""
    for pid in _descendants(app_pid):
        try:
            if module in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return app_pid if module == b"inferstream.app.worker" else None


PROFILE_RATE = 200  # py-spy samples per second


def start_profile(pid: int, seconds: float, path: Path) -> subprocess.Popen[bytes]:
    """py-spy (the GIL holder only, without pausing the process) on process ``pid`` for ``seconds``."""
    return subprocess.Popen(["py-spy", "record", "--gil", "--nonblocking", "-r", str(PROFILE_RATE), "-f", "raw",
                             "-d", str(int(seconds)), "-p", str(pid), "-o", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def profile_summary(path: Path, seconds: float) -> dict[str, Any]:
    """The GIL's busy share of the profiled worker and its top functions (inclusive share of GIL samples)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gil_profile import summarise

    if not path.is_file():
        return {"profile_error": "py-spy wrote no profile"}
    total, inclusive, own = summarise(path)
    top = {k: round(v / max(total, 1), 3) for k, v in inclusive.most_common(45)}
    return {"gil_busy": round(total / (PROFILE_RATE * seconds), 3), "gil_samples": total, "gil_top": top,
            "gil_self": {k: round(v / max(total, 1), 3) for k, v in own.most_common(25)}}


def switch_site(out: Path) -> Path:
    """A folder whose ``sitecustomize`` sets the GIL switch interval from ``BENCH_SWITCH_INTERVAL`` (seconds) and
    arms ``kernel_sample`` when ``BENCH_KERNELS_GO`` is set."""
    site = out / "switch-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os, sys\nif os.environ.get('BENCH_SWITCH_INTERVAL'):\n"
        "    sys.setswitchinterval(float(os.environ['BENCH_SWITCH_INTERVAL']))\n"
        "if os.environ.get('BENCH_KERNELS_GO'):\n"
        f"    sys.path.append({str(Path(__file__).resolve().parent)!r})\n"
        "    import kernel_sample\n    kernel_sample.arm()\n")
    return site


def run_app(cfg: dict[str, Any], workers: int | str, out: Path, name: str, total: int, timeout_s: float,
            mps: str, src: Path | None = None, profile_s: float = 0.0, switch_s: float = 0.0,
            kernels_s: float = 0.0) -> dict[str, Any]:
    import yaml

    path = out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = _free_port()
    cmd = [sys.executable, "-m", "inferstream.app.cli", "run", str(path), "--workers", str(workers),
           "--console", "quiet", "--metrics-port", str(port), "--mps", mps]
    samples: list[tuple[float, int]] = []
    cpu: list[tuple[float, float]] = []
    served: list[tuple[float, dict[str, float]]] = []
    t0 = time.perf_counter()
    with Sampler(Nvml()) as sampler, open(out / f"{name}.log", "w") as log:
        env = dict(os.environ)
        if src is not None:  # an older tree's code first on the path (its plugins are thin shims into it)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
        if switch_s:
            env["BENCH_SWITCH_INTERVAL"] = str(switch_s)
        go, kernels_out = out / f"{name}.kernels-go", out / f"{name}.kernels"
        if kernels_s:
            kernels_out.mkdir(exist_ok=True)
            env.update({"BENCH_KERNELS_GO": str(go), "BENCH_KERNELS_S": str(kernels_s),
                        "BENCH_KERNELS_OUT": str(kernels_out)})
        if switch_s or kernels_s:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(switch_site(out)), env.get("PYTHONPATH", "")) if p)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        spy = server_spy = None
        while proc.poll() is None and time.perf_counter() - t0 < timeout_s:
            scraped = _scrape(port)
            now = time.perf_counter()
            if scraped is not None:
                done = scraped[0]
                samples.append((now, done))
                cpu.append((now, _busy_cpu_s()))
                served.append((now, scraped[1]))
                if kernels_s and not go.exists() and done >= 0.25 * total:
                    go.touch()  # every process of the run samples its kernels now (kernel_sample)
                if profile_s and spy is None and done >= 0.25 * total:
                    spy = start_profile(_worker_pid(proc.pid) or proc.pid, profile_s, out / f"{name}.gil.txt")
                    if (server := _worker_pid(proc.pid, b"inferstream.model_server")) is not None:
                        server_spy = start_profile(server, profile_s, out / f"{name}.server.gil.txt")
            time.sleep(0.25)
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait()
        for profiler in (spy, server_spy):
            if profiler is not None:
                profiler.wait(timeout=30)
    result: dict[str, Any] = {"workers": workers, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1)}
    log = (out / f"{name}.log").read_text()
    if forwards := re.search(r"model server: (\d+) frames in (\d+) forwards", log):
        result["per_forward"] = round(int(forwards[1]) / int(forwards[2]), 2)
    if warmed := re.findall(r"model server: warmed up for batches of .* in (\S+) s", log):  # its graph captures
        result["server_warm_s"] = round(sum(map(float, warmed)), 1)
    if batch := re.search(r"batch fill (\S+), wait (\S+) ms, infer (\S+) ms/batch", log):  # the run's summary
        result["batch_wait_ms"], result["batch_infer_ms"] = float(batch[2]), float(batch[3])  # whole-run means
    if stages := re.search(r"a batch's time: (.*) ms$", log, re.MULTILINE):  # whole-run means per batch (ms)
        result["batch_stages_ms"] = {k: float(v) for k, v in (part.rsplit(" ", 1) for part in stages[1].split(", "))}
    if startup := re.search(r"after (\S+) s of startup", log):
        result["startup_s"] = float(startup[1])
    if len(samples) < 3 or samples[-1][1] < 0.5 * total:
        result["error"] = f"only {samples[-1][1] if samples else 0} of {total} frames seen (see {name}.log)"
        return result
    fps, lo, hi = rate_between(samples, total)
    window = [(t, c) for t, c in cpu if lo <= t <= hi]
    cores = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0]) if len(window) > 1 else None
    result.update({"fps": round(fps, 1), "frames_seen": samples[-1][1], "host_cores": cores and round(cores, 2),
                   **sampler.window(lo, hi), **server_window(served, lo, hi)})
    if kernels_s:
        from kernel_sample import summarise

        result["kernels"] = summarise(kernels_out)
    if profile_s:
        result.update(profile_summary(out / f"{name}.gil.txt", profile_s))
        if (out / f"{name}.server.gil.txt").is_file():
            server = profile_summary(out / f"{name}.server.gil.txt", profile_s)
            result.update({"server_gil_busy": server["gil_busy"], "server_gil_self": server["gil_self"]})
    return result


@dataclass(frozen=True)
class Spec:
    """One run: ``W:MPS:TRACKER[:bN|:bapp][:iN][:sS]`` (see the module docstring); ``W`` = auto: the app's
    ``--workers auto``, which this bench counts as the app's rule does (``auto_workers``)."""

    workers: int
    mps: str
    tracker: bool
    auto: bool = False
    batch: int = 0  # 0: min(32, streams per worker); -1: the app's default (no batch-size in the config)
    instances: int = 1
    switch_s: float = 0.0
    in_flight: int = 1
    server: bool = False  # infer.model-server: one process holds the model for every worker
    delay_ms: float = 0.0
    max_batch: int = 32  # the model server's max-batch
    mps_priority: str = "normal"  # the model server's mps-priority
    every_sum: bool = False  # the model server's capture: every-sum
    old_only: bool = False  # with --ab-old: this run on the older tree only (else each run on both)
    inductor: bool = False  # the model compiled by torch.compile (pyinfer graph=inductor)

    @classmethod
    def parse(cls, text: str, streams: int) -> Spec:
        w, mps, tracker, *extra = text.split(":")
        opts: dict[str, Any] = {}
        for field_ in extra:
            kind, value = field_[0], field_[1:]
            if kind == "b":
                opts["batch"] = -1 if value == "app" else int(value)
            elif kind == "i":
                opts["instances"] = int(value)
            elif kind == "s":
                opts["switch_s"] = float(value)
            elif kind == "f":
                opts["in_flight"] = int(value)
            elif kind == "m":
                opts["server"] = True
            elif kind == "d":
                opts["delay_ms"] = float(value)
            elif kind == "x":
                opts["max_batch"] = int(value)
            elif field_ in ("pb", "pw"):
                opts["mps_priority"] = "below-normal" if field_ == "pb" else "workers-below-normal"
            elif field_ == "ce":
                opts["every_sum"] = True
            elif field_ == "o":
                opts["old_only"] = True
            elif field_ == "gi":
                opts["inductor"] = True
            else:
                raise SystemExit(f"--runs: unknown field {field_!r} in {text!r}")
        if w == "auto":  # as the app's auto_layout: a model server and two batches in flight, unless set here
            if opts.get("instances", 1) == 1 and _auto_workers(streams, served=True) > 1:
                opts["server"] = True
                opts.setdefault("in_flight", 2)
            return cls(_auto_workers(streams, opts.get("server", False)), mps, tracker == "yes", auto=True, **opts)
        return cls(int(w), mps, tracker == "yes", **opts)

    def batch_size(self, streams: int) -> int:
        """The batch each batch-group runs (the app's default: a group's share of a worker's streams)."""
        from inferstream.app.pipeline import group_batch

        per_group = -(-streams // self.workers) // self.instances
        if self.batch < 0:  # the app's default_batch on CUDA
            return group_batch(per_group, cuda=True, in_flight=self.in_flight)
        return self.batch or min(32, per_group)


def _auto_workers(streams: int, served: bool) -> int:
    from inferstream.app.layout import cpu_cores, cuda_workers

    return cuda_workers(streams, cpu_cores(), served)


def one_run(args: argparse.Namespace, clips: list[Path], report: dict[str, Any], spec: Spec, total: int,
            side: str = "") -> dict[str, Any]:
    workers, tracker, mps, switch_s = spec.workers, spec.tracker, spec.mps, spec.switch_s
    batch = spec.batch_size(args.streams)
    cfg: dict[str, Any] = {
        "sources": [{"id": f"cam{i}", "file": str(clips[i % len(clips)])} for i in range(args.streams)],
        "decode": "nvh264dec",
        "infer": {"model": str(MODEL), "device": "cuda", "max-latency": 50,
                  **({"batch-size": batch} if spec.batch >= 0 else {}),
                  **({"instances": spec.instances} if spec.instances > 1 else {}),  # older trees lack these
                  **({"in-flight": spec.in_flight} if spec.in_flight > 1 or spec.auto else {}),
                  **({"graph": "inductor"} if spec.inductor else {}),
                  **({"model-server": {"delay-ms": spec.delay_ms, "max-batch": spec.max_batch,
                                       **({"mps-priority": spec.mps_priority} if spec.mps_priority != "normal" else {}),
                                       **({"capture": "every-sum"} if spec.every_sum else {})}}
                     if spec.server else {})},
        "sink": {"type": "fakesink"},
    }
    if tracker:
        cfg["tracker"] = {}
    name = (f"w{'auto' if spec.auto else ''}{workers}-b{batch}-i{spec.instances}-f{spec.in_flight}-{'track' if tracker else 'notrack'}-mps{mps}"
            f"{f'-si{switch_s}' if switch_s else ''}{f'-server{spec.delay_ms:g}' if spec.server else ''}"
            f"{f'-x{spec.max_batch}' if spec.server and spec.max_batch != 32 else ''}"
            f"{'' if spec.mps_priority == 'normal' else '-' + spec.mps_priority}{'-everysum' if spec.every_sum else ''}"
            f"{'-inductor' if spec.inductor else ''}"
            f"{'-' + side if side else ''}")
    res = run_app(cfg, "auto" if spec.auto else workers, args.out, name, total, args.run_timeout, mps,
                  args.ab_old if side == "old" else None, args.profile, switch_s, args.kernels)
    res.update({"name": name, "tracker": tracker, "batch": batch, "instances": spec.instances,
                "in_flight": spec.in_flight, "mps": mps, "server": spec.server, "delay_ms": spec.delay_ms,
                "max_batch": spec.max_batch, "mps_priority": spec.mps_priority,
                "capture": "every-sum" if spec.every_sum else "powers-of-two",
                "code": side or "this tree", "inductor": spec.inductor,
                "switch_interval_s": switch_s or sys.getswitchinterval()})
    def best(b: int, compiled: bool) -> float:  # the bare forward of the same kind: compiled or TorchScript
        return max(v for k, v in report["ceiling"].items() if k.endswith(f"-b{b}") and k.startswith("inductor") == compiled)

    res["of_ceiling_same_batch"] = round(res.get("fps", 0) / best(batch, spec.inductor), 3)
    res["of_ceiling_b32"] = round(res.get("fps", 0) / best(32, spec.inductor), 3)
    res["of_torchscript_b32"] = round(res.get("fps", 0) / best(32, False), 3)
    on_clips = report["ceiling"].get("channels_last-b32-clips")
    res["of_clips_ceiling_b32"] = round(res.get("fps", 0) / on_clips, 3) if on_clips else "-"
    nvdec = report.get("nvdec", {}).get("fps")
    res["of_nvdec_alone"] = round(res.get("fps", 0) / nvdec, 3) if nvdec else "-"
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--frames", type=int, default=450, help="frames per clip (per stream)")
    ap.add_argument("--clips", type=int, default=4)
    ap.add_argument("--tracker", default="yes,no")
    ap.add_argument("--run-timeout", type=float, default=150.0)
    ap.add_argument("--mps", default="off", help="off, on or off,on: the runs without / under the CUDA MPS daemon")
    ap.add_argument("--runs", default="", help="WORKERS:MPS:TRACKER[:bN][:iN][:fN][:m][:dX][:xN][:sS][:gi],... (e.g. 8:on:no,4:on:yes:b8) "
                    "instead of the product of --workers, --mps and --tracker")
    ap.add_argument("--profile", type=float, default=0.0, help="seconds of py-spy --gil on one worker per run")
    ap.add_argument("--kernels", type=float, default=0.0, help="seconds of every process's device time per kernel "
                    "at a quarter of the frames (kernel_sample.py; torch's profiler)")
    ap.add_argument("--nvdec-processes", type=int, default=8, help="processes decoding the streams into a fakesink "
                    "for NVDEC's own ceiling (nvdec_ceiling.py; 0: not measured)")
    ap.add_argument("--ceiling-from", type=Path, help="an earlier app_workers.json: its ceiling, not measured again")
    ap.add_argument("--ab-old", type=Path, help="an older src/ to run each config with too, alternating")
    args = ap.parse_args()
    Gst.init(None)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"streams": args.streams, "frames": args.frames}
    t = time.perf_counter()
    clips = make_clips(args.out, args.clips, args.frames)
    report["clips_s"] = round(time.perf_counter() - t, 1)
    if args.nvdec_processes:  # the decoder's own ceiling on these clips, as the runs' workers decode them
        report["nvdec"] = nvdec_ceiling(clips, args.streams, args.nvdec_processes)
        print("nvdec alone", report["nvdec"], flush=True)
    if args.runs:
        specs = [Spec.parse(r, args.streams) for r in args.runs.split(",")]
    else:
        specs = [Spec(int(w), m, t == "yes") for m in args.mps.split(",") for t in args.tracker.split(",")
                 for w in args.workers.split(",")]
    batches = sorted({s.batch_size(args.streams) for s in specs} | {32}  # b32: the goal's
                     | {s.max_batch for s in specs if s.server})
    if args.ceiling_from:  # measured by an earlier invocation of this call (the runs here are profiled)
        report["ceiling"] = json.loads(args.ceiling_from.read_text())["ceiling"]
    else:
        check_clip = ROOT / ".gpu-carry" / "clips" / "vtest-h264.mp4"  # a real camera's video, when carried
        contents = {"clips": letterboxed_frames(clips, max(batches)),
                    **({"vtest": letterboxed_frames([check_clip], max(batches))} if check_clip.exists() else {})}
        report["ceiling"] = bare_ceiling(batches, contents, inductor=any(s.inductor for s in specs))
    print("ceiling", report["ceiling"], flush=True)
    total = args.streams * args.frames
    report["runs"] = []
    for i, spec in enumerate(specs):
        if args.ab_old is None:
            sides = [""]
        elif any(s.old_only for s in specs):  # runs marked :o on the older tree, the others on this one
            sides = ["old" if spec.old_only else "new"]
        else:
            sides = ["old", "new"] if i % 2 == 0 else ["new", "old"]
        for side in sides:
            res = one_run(args, clips, report, spec, total, side)
            report["runs"].append(res)
            print(res["name"], res, flush=True)
            (args.out / "app_workers.json").write_text(json.dumps(report, indent=1))
    lines = [(f"{args.streams} x 1080p H.264 streams, {args.frames} frames each, app `inferstream run --workers N` "
              "(nvh264dec -> pyinfer CUDA memory, yolo11s fp16 TorchScript, CUDA graphs)"), "",
             f"bare model ceiling (img/s, one CUDA graph, static fp16 input): {report['ceiling']}", "",
             f"NVDEC alone (the streams decoded into a fakesink, nvdec_ceiling.py): {report.get('nvdec', '-')}", "",
             ("| code | workers | instances | batch | in flight | model server (frames per forward in the window), its busy share, the device's | pytracker | MPS | GIL switch ms "
              "| model | frames/s | of bare ceiling (same batch, same model) | of bare b32 (same model) | of the bare TorchScript b32 "
              "| of the model on the clips' frames, b32 | of NVDEC alone | GPU % | NVDEC % | host cores | a worker's GIL busy "
              "| a batch's wait / life, ms | its stages, ms | rc |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        server = (f"max {r.get('max_batch', 32)}, delay {r.get('delay_ms', 0):g} ms "
                  f"({r.get('server_per_forward', r.get('per_forward', '-'))}), busy {r.get('server_busy', '-')}, "
                  f"device {r.get('server_device_busy', '-')} ({r.get('server_device_ms_per_forward', '-')} ms a "
                  f"forward), queued {r.get('server_queued', '-')}, a request {r.get('server_request_ms', '-')} ms there, "
                  f"decoding busy {r.get('server_decode_busy', '-')} ({r.get('server_forwards_per_decode', '-')} "
                  f"forwards a call of {r.get('server_decode_ms', '-')} ms), GIL {r.get('server_gil_busy', '-')}, warm-up "
                  f"{r.get('server_warm_s', '-')} s"
                  f"{'' if r.get('mps_priority', 'normal') == 'normal' else ', MPS priority ' + r['mps_priority']}"
                  f"{', a graph for every sum' if r.get('capture') == 'every-sum' else ''}"
                  if r.get("server") else "no")
        lines.append(f"| {r['code']} | {r['workers']} | {r.get('instances', 1)} | {r['batch']} | {r.get('in_flight', 1)} | {server} | {'yes' if r['tracker'] else 'no'} | "
                     f"{r['mps']} | {1e3 * r['switch_interval_s']:g} | {'inductor' if r.get('inductor') else 'TorchScript'} | "
                     f"{r.get('fps', '-')} | {r['of_ceiling_same_batch']} | {r['of_ceiling_b32']} | "
                     f"{r.get('of_torchscript_b32', '-')} | {r.get('of_clips_ceiling_b32', '-')} | "
                     f"{r.get('of_nvdec_alone', '-')} | "
                     f"{r.get('gpu_util_pct', '-')} | "
                     f"{r.get('nvdec_util_pct', '-')} | {r.get('host_cores', '-')} | {r.get('gil_busy', '-')} | "
                     f"{r.get('batch_wait_ms', '-')} / {r.get('batch_infer_ms', '-')} | "
                     f"{', '.join(f'{k} {v:g}' for k, v in r.get('batch_stages_ms', {}).items()) or '-'} | {r['rc']}"
                     + (f" ({r['error']})" if "error" in r else "") + " |")
    (args.out / "app_workers.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
