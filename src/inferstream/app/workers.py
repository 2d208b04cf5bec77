"""``inferstream run --workers N``: the sources sharded over N worker processes (``app/worker.py``), each running
its shard through the in-process runner with its own batch-group on the same device, under one supervisor.

One interpreter's GIL bounds a pipeline's host work (``BENCHMARKS.md``); N interpreters lift that bound. The parent
draws one console and serves one Prometheus endpoint for all workers from the snapshots they report, forwards
Ctrl-C/SIGTERM to every worker (each finishes its files), and reports a worker that dies with its streams: it is
restarted (``worker-restarts`` times; its streams start over) or its streams are failed while the others go on.
A worker that dies before its first frame, or fails as a whole, fails the run fast: the others are stopped.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from queue import Empty, Queue
from typing import IO, Any, Final, Protocol

from inferstream.app.children import describe_exit, relay_stderr
from inferstream.app.config import AppConfig
from inferstream.app.console import Console
from inferstream.app.layout import cpu_cores
from inferstream.app.metrics import MetricsServer, Snapshot, StreamView
from inferstream.app.mps import cuda_mps
from inferstream.app.pipeline import Plan, build_plan
from inferstream.app.runner import EXIT_EVENTS_LOST, EXIT_OK, EXIT_STREAM_FAILED, RunError, Runner, RunResult
from inferstream.app.serving import model_server
from inferstream.app.signals import StopSignals
from inferstream.app.stream_probes import FrameHook
from inferstream.app.worker import decode_snapshot, encode_plan
from inferstream.app.workerstats import health, merge_batches, worker_metrics

TICK_S: Final = 0.1
STDERR_TAIL: Final = 20
EXIT_GRACE_S: Final = 15.0  # after the EOS timeout, how long a worker may take to exit before it is killed


def worker_environment(cfg: AppConfig, workers: int, cores: int | None = None,
                       environ: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's environment: on CPU, ``OMP_NUM_THREADS`` = its share of the cores (unless set already).

    Each worker's torch (and ONNX Runtime) would otherwise start a thread per core, and idle OpenMP threads spin:
    N workers on C cores ran N x C threads for C cores, and two workers ran far slower than one process
    (``BENCHMARKS.md``, *Worker processes*, run C). A model server is not a worker: it keeps every core for the one
    model.
    """
    env = dict(os.environ if environ is None else environ)
    if not cfg.infer.device.startswith("cuda") and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (cores or cpu_cores()) // max(1, workers)))
    return env


def shards(n_sources: int, n_workers: int) -> list[range]:
    """Contiguous, balanced shards of source indices: the first ``n_sources % n_workers`` get one more."""
    size, extra = divmod(n_sources, n_workers)
    out, start = [], 0
    for i in range(n_workers):
        end = start + size + (1 if i < extra else 0)
        out.append(range(start, end))
        start = end
    return out


class WorkerProcess(Protocol):
    """What the supervisor needs of a worker: a ``subprocess.Popen`` here, a Ray actor in cluster mode."""

    pid: int

    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


@dataclass
class _Worker:
    index: int
    plan: Plan
    shard: range  # the indices of its sources in the config
    proc: WorkerProcess | None = None
    node: str | None = None  # cluster mode: the Ray node it runs on
    generation: int = 0
    snap: Snapshot | None = None
    snap_at: float = 0.0  # when it was taken (time.monotonic, the same clock in every process on the host)
    ready: bool = False  # it handles SIGINT (it said so): signals wait until then
    sigints: int = 0  # SIGINTs sent to this process
    closed_at: float | None = None  # when its report pipe closed (it is exiting)
    exit_code: int | None = None  # the worker's own report (None: it died)
    fatal: str | None = None
    restarts: int = 0
    causes: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # stream id -> why (the worker died)
    ended: bool = False
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL))

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.plan.streams]

    @property
    def name(self) -> str:
        return f"worker {self.index} ({', '.join(self.ids)})"

    @property
    def where(self) -> str:
        return f"{self.name} on node {self.node}" if self.node else self.name

    def any_frames(self) -> bool:
        return self.snap is not None and any(v.frames for v in self.snap.streams)


class Supervisor:
    """Start the workers, relay their reports to one console and endpoint, restart or fail the ones that die."""

    def __init__(self, cfg: AppConfig, n_workers: int, console: Console, metrics_port: int | None = None,
                 eos_timeout_s: float = 10.0, extra_metrics: Callable[[], str] = str) -> None:
        """``extra_metrics``: more Prometheus text for the endpoint (the model server's)."""
        self.cfg, self.console, self.metrics_port, self.eos_timeout_s = cfg, console, metrics_port, eos_timeout_s
        self.extra_metrics = extra_metrics
        self.workers = [_Worker(i, build_plan(cfg, shard), shard)
                        for i, shard in enumerate(shards(len(cfg.sources), n_workers))]
        self.order = cfg.stream_ids()
        self.inbox: Queue[tuple[int, int, dict[str, Any] | None]] = Queue()
        self.metrics: MetricsServer | None = None
        self._signals = StopSignals()
        self._forwarded = 0
        self._sigints = 0  # SIGINTs every worker is to have had: 1 finish the streams, 2 stop now
        self._deadline: float | None = None
        self._stopping = False
        self._said: set[str] = set()
        self._started = time.monotonic()

    # processes --------------------------------------------------------------------------------------------
    def _spawn(self, w: _Worker) -> None:
        w.generation += 1
        w.snap, w.exit_code, w.fatal, w.ready, w.sigints, w.closed_at = None, None, None, False, 0, None
        w.proc = self._launch(w)

    def _launch(self, w: _Worker) -> WorkerProcess:
        """Start ``w``'s process; its reports reach the inbox as (index, generation, item), None when it ends."""
        read_fd, write_fd = os.pipe()
        proc = subprocess.Popen([sys.executable, "-m", "inferstream.app.worker", str(write_fd)],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(write_fd,),
                                start_new_session=True,  # the terminal's Ctrl-C reaches the parent only
                                env=worker_environment(self.cfg, len(self.workers)))
        os.close(write_fd)
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(json.dumps({"plan": encode_plan(w.plan), "eos_timeout_s": self.eos_timeout_s}).encode())
        proc.stdin.close()
        for target, stream in ((self._read_reports, os.fdopen(read_fd, "r")), (self._read_stderr, proc.stderr)):
            threading.Thread(target=target, args=(w, w.generation, stream), daemon=True,
                             name=f"worker{w.index}-{target.__name__}").start()
        return proc

    def _read_reports(self, w: _Worker, generation: int, stream: IO[str]) -> None:
        with stream:
            for line in stream:
                try:
                    self.inbox.put((w.index, generation, json.loads(line)))
                except ValueError:
                    continue  # a torn line from a dying worker
        self.inbox.put((w.index, generation, None))

    @staticmethod
    def _read_stderr(w: _Worker, _generation: int, stream: IO[bytes]) -> None:
        """What a worker prints on stderr goes to ours; its tail says why it died."""
        relay_stderr(stream, w.stderr)

    def _signal_all(self, signum: int) -> None:
        for w in self.workers:
            if not w.ended and w.proc is not None and w.proc.poll() is None:
                w.proc.send_signal(signum)

    # running ----------------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        if self.metrics_port is not None:
            try:
                self.metrics = MetricsServer(self.metrics_port)
            except OSError as exc:
                raise RunError(f"cannot serve metrics on port {self.metrics_port}: {exc.strerror or exc}") from None
        self._signals.install()
        try:
            for w in self.workers:
                self._spawn(w)
            self.say(self._started_line())
            if self.metrics is not None:
                self.say(f"metrics: http://127.0.0.1:{self.metrics.port}/metrics")
            self._loop()
        finally:
            self._signal_all(signal.SIGKILL)  # only a worker still running after its deadline, or on an exception
            self._signals.restore()
            final = self.snapshot()
            if self.metrics is not None:
                self.metrics.publish(final, worker_metrics(self.workers, self.order) + self.extra_metrics())
                self.metrics.close()
            self.console.message("workers: " + "; ".join(map(health, self.workers)),
                                 error=any(w.causes or w.fatal for w in self.workers))
            self.console.close(final)
        died = any(w.causes or w.fatal for w in self.workers)
        failed = died or any(v.status == "failed" for v in final.streams)
        lost = any(w.exit_code == EXIT_EVENTS_LOST for w in self.workers)
        code = self._signals.exit_code if self._interrupts else EXIT_STREAM_FAILED if failed else \
            EXIT_EVENTS_LOST if lost else EXIT_OK
        outputs = {s.id: s.output for w in self.workers for s in w.plan.streams if s.output}
        return RunResult(code, bool(self._interrupts), final, outputs)

    def _started_line(self) -> str:
        return "workers: " + "; ".join(f"{w.name} pid {w.proc.pid if w.proc else '-'}" for w in self.workers)

    @property
    def _interrupts(self) -> int:
        return self._signals.count

    def _loop(self) -> None:
        while not all(w.ended for w in self.workers):
            try:
                item: tuple[int, int, dict[str, Any] | None] | None = self.inbox.get(timeout=TICK_S)
            except Empty:
                item = None
            while item is not None:
                self._handle(*item)
                try:
                    item = self.inbox.get_nowait()
                except Empty:
                    item = None
            if self._interrupts > self._forwarded:
                self._forward_interrupt()
            self._sync_signals()
            self._reap()
            if self._deadline is not None and time.monotonic() > self._deadline:
                self.say("workers did not finish in time: killing them (files may be incomplete)", error=True)
                self._signal_all(signal.SIGKILL)
                self._deadline = None
            snap = self.snapshot()
            self.console.update(snap)
            if self.metrics is not None:
                self.metrics.publish(snap, worker_metrics(self.workers, self.order) + self.extra_metrics())

    def _forward_interrupt(self) -> None:
        self._forwarded = self._interrupts
        if self._interrupts == 1:
            self.say(f"stopping: finishing the streams of every worker (up to {self.eos_timeout_s:g} s; "
                     "Ctrl-C again to abort)")
            self.stop()
        else:
            self.say("second Ctrl-C: stopping every worker now (files may be incomplete)", error=True)
            self._sigints = 2

    def stop(self) -> None:
        """Every worker finishes its streams and files (one SIGINT each), with a deadline for them to exit."""
        if not self._stopping:
            self._stopping = True
            self._sigints = max(self._sigints, 1)
            self._deadline = time.monotonic() + self.eos_timeout_s + EXIT_GRACE_S

    def _sync_signals(self) -> None:
        """Each running worker gets the SIGINTs it is due, once it handles them (a restarted one starts at 0)."""
        for w in self.workers:
            while (w.ready and w.closed_at is None and not w.ended and w.sigints < self._sigints
                   and w.proc is not None and w.proc.poll() is None):
                w.proc.send_signal(signal.SIGINT)
                w.sigints += 1

    def _reap(self) -> None:
        """Workers whose pipe closed: their exit, once the process is gone (killed if it lingers)."""
        for w in self.workers:
            if w.closed_at is None or w.ended or w.proc is None:
                continue
            rc = w.proc.poll()
            if rc is not None:
                self._on_exit(w, rc)
            elif time.monotonic() - w.closed_at > EXIT_GRACE_S:
                w.proc.kill()

    def say(self, text: str, error: bool = False) -> None:
        """A message, once: each worker says "Ctrl-C: finishing the streams", the console shows it once."""
        if text not in self._said:
            self._said.add(text)
            self.console.message(text, error)

    # reports ----------------------------------------------------------------------------------------------
    def _handle(self, index: int, generation: int, item: dict[str, Any] | None) -> None:
        w = self.workers[index]
        if generation != w.generation:
            return  # from a worker that was replaced
        if item is None:
            w.closed_at = time.monotonic()
        elif "ready" in item:
            w.ready = True
        elif "snapshot" in item:
            w.snap, w.snap_at = decode_snapshot(item["snapshot"]), float(item.get("at", time.monotonic()))
            if self.cfg.on_stream_error == "stop" and any(v.status == "failed" for v in w.snap.streams):
                self.stop()  # the worker winds its own shard down; the others too
        elif "message" in item:
            text, error = item["message"]
            self.say(text, bool(error))
        elif "fatal" in item:
            w.fatal = str(item["fatal"])
        elif "exit" in item:
            w.exit_code = int(item["exit"])

    def _on_exit(self, w: _Worker, rc: int) -> None:
        if w.fatal is not None:
            self._fail(w, f"failed: {w.fatal}", fast=True)
        elif w.exit_code is None:
            self._on_death(w, self._exit_cause(w, rc))
        else:
            w.ended = True

    def _exit_cause(self, w: _Worker, rc: int) -> str:
        return describe_exit(rc, w.stderr)

    def _on_death(self, w: _Worker, cause: str) -> None:
        w.causes.append(cause)
        if self._stopping:
            self._fail(w, f"died while stopping: {cause}")
        elif not w.any_frames():
            self._fail(w, f"died before its first frame: {cause}", fast=w.restarts == 0)  # a restart: not the run
        elif w.restarts < self.cfg.worker_restarts:
            w.restarts += 1
            self.console.message(f"{w.name} died: {cause}; restarting its streams from the start "
                                 f"(restart {w.restarts} of {self.cfg.worker_restarts})", error=True)
            self._spawn(w)
        else:
            self._fail(w, f"died: {cause}; no restarts left")
            if self.cfg.on_stream_error == "stop":
                self.stop()

    def _fail(self, w: _Worker, why: str, fast: bool = False) -> None:
        """The worker's unfinished streams fail, noted ``worker N <why>``; ``fast``: the whole run stops."""
        w.ended = True
        views = {v.id: v for v in (w.snap.streams if w.snap else ())}
        for sid in w.ids:
            if sid not in views or views[sid].status in ("starting", "running"):
                w.failed[sid] = f"worker {w.index} {why}"
        self.console.message(f"{w.name} {why}: its streams failed", error=True)
        if fast and not self._stopping:
            self.console.message("stopping the other workers", error=True)
            self.stop()

    # the merged view --------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """All workers' last reports as one snapshot, streams in config order."""
        views: dict[str, StreamView] = {}
        for w in self.workers:
            reported = {v.id: v for v in (w.snap.streams if w.snap else ())}
            for sid in w.ids:
                v = reported.get(sid) or StreamView(sid, "starting", 0, 0.0, None, None, 0, 0, None)
                if sid in w.failed:
                    v = replace(v, status="failed", fps=0.0, eta_s=None, error=w.failed[sid])
                views[sid] = v
        snaps = [(w.snap, w.snap_at) for w in self.workers if w.snap is not None]
        windows = [(at - s.active_s, at) for s, at in snaps if s.active_s > 0]  # first frame .. last, per worker
        active = max(end for _, end in windows) - min(start for start, _ in windows) if windows else 0.0
        return Snapshot(time.monotonic() - self._started, tuple(views[sid] for sid in self.order),
                        merge_batches([s.batch for s, _ in snaps]), active)


def run_config(cfg: AppConfig, workers: tuple[int, str | None], console: Console, metrics_port: int | None = None,
               eos_timeout_s: float = 10.0, frame_hooks: Sequence[FrameHook] = (), plan: Plan | None = None
               ) -> RunResult:
    """Run a validated config: in this process (``Runner``; ``plan``: its plan if already built) or, for more
    than one worker, over worker processes. ``workers``: what :func:`worker_count` said."""
    n, note = workers
    if note:
        console.message(note)
    processes = n + (cfg.infer.model_server is not None)
    if processes == 1:
        return Runner(plan or build_plan(cfg), console, metrics_port, eos_timeout_s, frame_hooks).run()
    with cuda_mps(cfg.mps, processes, cfg.infer.device, console.message), \
            model_server(cfg, console.message) as (served, server_metrics):
        if n > 1:
            return Supervisor(served, n, console, metrics_port, eos_timeout_s, server_metrics).run()
        return Runner(build_plan(served), console, metrics_port, eos_timeout_s, frame_hooks, server_metrics).run()
