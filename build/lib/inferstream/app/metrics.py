"""Run counters (per-stream frames, FPS, QoS, progress, batching) and their Prometheus text endpoint.

Streaming threads only bump integers on :class:`StreamCounters`; the main loop turns them into an immutable
:class:`Snapshot` a few times a second, which the console draws and the HTTP server renders.
"""
from __future__ import annotations

import http.server
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from inferstream.batching.slots import STAGES

STATUSES: Final = ("starting", "running", "done", "failed", "stopped")
FPS_WINDOW_S: Final = 3.0


@dataclass
class StreamCounters:
    """Mutable per-stream state: written by probes (frames, pts) and the bus loop (the rest)."""

    id: str
    total_frames: int | None = None
    live: bool = False
    status: str = "starting"
    error: str | None = None
    frames: int = 0
    last_pts_ns: int | None = None
    duration_ns: int | None = None
    late: int = 0
    dropped: int = 0
    first_frame_at: float | None = None
    ended_at: float | None = None
    lost_events: int = 0  # set once the run is over (app/delivery.py)
    events_note: str = ""
    eos_sinks: set[str] = field(default_factory=set)
    _samples: deque[tuple[float, int]] = field(default_factory=deque)

    def on_frame(self, pts_ns: int | None) -> None:  # streaming thread
        if self.first_frame_at is None:
            self.first_frame_at = time.monotonic()
        self.frames += 1
        if pts_ns is not None and pts_ns >= 0:
            self.last_pts_ns = pts_ns

    def reset(self) -> None:
        """Forget what a run that is being restarted counted."""
        self.frames, self.last_pts_ns, self.first_frame_at, self.late, self.dropped = 0, None, None, 0, 0
        self.eos_sinks.clear()
        self._samples.clear()

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed", "stopped")

    def finish(self, status: str, error: str | None = None) -> None:
        if not self.finished:
            self.status, self.error, self.ended_at = status, error, time.monotonic()

    def fps(self, now: float) -> float:
        """Frames per second over the last few seconds; the average over the whole stream once it ended."""
        if self.first_frame_at is None:
            return 0.0
        if self.finished:
            span = (self.ended_at or now) - self.first_frame_at
            return self.frames / span if span > 0 else 0.0
        self._samples.append((now, self.frames))
        while len(self._samples) > 2 and now - self._samples[1][0] >= FPS_WINDOW_S:
            self._samples.popleft()
        t0, n0 = self._samples[0]
        if now - t0 < 0.2:
            span = now - self.first_frame_at
            return self.frames / span if span > 0 else 0.0
        return (self.frames - n0) / (now - t0)

    def progress(self) -> float | None:
        """Fraction done (0..1) when the end is known: a frame count, else the media duration."""
        if self.status == "done":
            return 1.0
        if self.total_frames:
            return min(1.0, self.frames / self.total_frames)
        if self.duration_ns and self.last_pts_ns is not None and not self.live:
            return min(1.0, self.last_pts_ns / self.duration_ns)
        return None

    def eta_s(self, now: float) -> float | None:
        done = self.progress()
        if done is None or done <= 0.0 or self.first_frame_at is None or self.finished:
            return None
        return (now - self.first_frame_at) * (1.0 - done) / done


@dataclass(frozen=True, slots=True)
class StreamView:
    id: str
    status: str
    frames: int
    fps: float
    progress: float | None
    eta_s: float | None
    late: int
    dropped: int
    error: str | None
    lost_events: int = 0
    events_note: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """``elapsed_s``: since the run started; ``active_s``: since the first frame left inference (0 before)."""

    elapsed_s: float
    streams: tuple[StreamView, ...]
    batch: dict[str, float]  # pyinfer's stats: batches, frames, mean-fill, mean-wait-ms, mean-infer-ms
    active_s: float = 0.0

    @property
    def total_fps(self) -> float:
        """Sum of the running streams' recent FPS; once none runs, frames over the active time."""
        running = [s.fps for s in self.streams if s.status in ("running", "starting")]
        if running:
            return sum(running)
        return self.total_frames / self.active_s if self.active_s > 0 else 0.0

    @property
    def total_frames(self) -> int:
        return sum(s.frames for s in self.streams)


def snapshot(counters: list[StreamCounters], batch: dict[str, float], started: float) -> Snapshot:
    now = time.monotonic()
    views = tuple(StreamView(c.id, c.status, c.frames, c.fps(now), c.progress(), c.eta_s(now), c.late, c.dropped,
                             c.error, c.lost_events, c.events_note) for c in counters)
    firsts = [c.first_frame_at for c in counters if c.first_frame_at is not None]
    ends = [c.ended_at or now for c in counters if c.first_frame_at is not None]
    active = max(ends) - min(firsts) if firsts else 0.0
    return Snapshot(now - started, views, dict(batch), active)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metric_lines(name: str, kind: str, help_: str, rows: Sequence[tuple[str, float]]) -> list[str]:
    """One metric in the Prometheus text format: HELP, TYPE and a line per ``(labels, value)`` row."""
    return [f"# HELP inferstream_{name} {help_}", f"# TYPE inferstream_{name} {kind}",
            *(f"inferstream_{name}{labels} {_number(value)}" for labels, value in rows)]


def _number(value: float) -> str:
    """Every digit: ``:g`` keeps six, so a counter past a million (a model server's frames after minutes) would
    read 1.23457e+06 and its rate would step in tens of frames."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def render_prometheus(snap: Snapshot) -> str:
    """The snapshot in the Prometheus text exposition format (version 0.0.4)."""
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, rows: list[tuple[str, float]]) -> None:
        out.extend(metric_lines(name, kind, help_, rows))

    per = [(f'{{stream="{_label(s.id)}"}}', s) for s in snap.streams]
    metric("frames_total", "counter", "Frames inferred per stream", [(lb, s.frames) for lb, s in per])
    metric("stream_fps", "gauge", "Frames per second per stream (recent window)", [(lb, s.fps) for lb, s in per])
    metric("fps", "gauge", "Frames per second over all running streams", [("", snap.total_fps)])
    metric("late_frames_total", "counter", "QoS messages (late buffers) per stream", [(lb, s.late) for lb, s in per])
    metric("dropped_frames_total", "counter", "Frames dropped by QoS per stream", [(lb, s.dropped) for lb, s in per])
    metric("events_lost_total", "counter", "Events (messages) lost per stream: dropped by drop-policy or "
           "undelivered at stop; known once the stream stopped", [(lb, s.lost_events) for lb, s in per])
    metric("stream_up", "gauge", "1 while the stream runs", [(lb, float(s.status in ("starting", "running")))
                                                             for lb, s in per])
    metric("stream_failed", "gauge", "1 when the stream was removed after an error",
           [(lb, float(s.status == "failed")) for lb, s in per])
    metric("stream_progress_ratio", "gauge", "Fraction of a finite stream done",
           [(lb, s.progress) for lb, s in per if s.progress is not None])
    names = {"batches": ("batches_total", "counter", "Batches run by the primary detector"),
             "frames": ("batched_frames_total", "counter", "Frames in those batches"),
             "mean-fill": ("batch_fill_mean", "gauge", "Mean frames per batch"),
             "mean-wait-ms": ("batch_wait_ms_mean", "gauge", "Mean wait of a frame for its batch, ms"),
             "mean-infer-ms": ("batch_infer_ms_mean", "gauge", "Mean time per batch, ms"),
             **{f"mean-{stage}-ms": (f"batch_{stage.replace('-', '_')}_ms_mean", "gauge",
                                     f"Mean time per batch in its {stage} stage, ms") for stage in STAGES}}
    for key, (name, kind, help_) in names.items():
        if key in snap.batch:
            metric(name, kind, help_, [("", float(snap.batch[key]))])
    metric("uptime_seconds", "gauge", "Seconds since the run started", [("", snap.elapsed_s)])
    return "\n".join(out) + "\n"


class MetricsServer:
    """``GET /metrics`` on 127.0.0.1:port (0: any free port) serving the latest snapshot, on a daemon thread."""

    def __init__(self, port: int) -> None:
        self._text = "# no data yet\n"
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404, "only /metrics here")
                    return
                body = server._text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()

    def publish(self, snap: Snapshot, extra: str = "") -> None:
        """Serve ``snap`` from now on; ``extra``: more metrics in the text format (the workers' health)."""
        self._text = render_prometheus(snap) + extra

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
