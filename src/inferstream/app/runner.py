"""Run a :class:`~inferstream.app.pipeline.Plan`: one bin per stream in one pipeline, a bus loop in the calling
thread, per-stream error isolation, bounded EOS shutdown on SIGINT, SIGTERM or SIGHUP (app/signals.py).

A stream whose elements post an ERROR is reported and its bin removed (``on-stream-error: continue``) or the whole
run is wound down (``stop``). Before the pipeline first reaches PLAYING a failed bin makes the whole state change
fail, so the remaining streams are then restarted from NULL.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst

from inferstream.app.console import Console, QuietConsole
from inferstream.app.delivery import read_delivery
from inferstream.app.gstprops import ensure_gst
from inferstream.app.metrics import MetricsServer, Snapshot, snapshot
from inferstream.app.pipeline import Plan, StreamPlan
from inferstream.app.signals import StopSignals
from inferstream.app.stream_probes import FrameHook, RunStream, attach_probes
from inferstream.errors import InferstreamError

TICK_NS: Final = 100 * Gst.MSECOND
EXIT_OK, EXIT_STREAM_FAILED, EXIT_EVENTS_LOST, EXIT_INTERRUPTED = 0, 1, 3, 130  # signals: 128 + number


class RunError(InferstreamError):
    """The run could not start or failed as a whole (not one stream)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended: ``exit_code`` 0 (all streams done, every event delivered or kept in a spool), 1 (a stream
    failed), 3 (events lost: dropped by drop-policy or undelivered at stop), 128 + N (stopped by signal N: 130
    Ctrl-C, 143 SIGTERM, 129 SIGHUP; the files are finished unless a second signal forced the stop)."""

    exit_code: int
    interrupted: bool
    snapshot: Snapshot
    outputs: dict[str, str]

    @property
    def frames(self) -> dict[str, int]:
        return {s.id: s.frames for s in self.snapshot.streams}

    @property
    def errors(self) -> dict[str, str]:
        return {s.id: s.error for s in self.snapshot.streams if s.error}


class Runner:
    def __init__(self, plan: Plan, console: Console | None = None, metrics_port: int | None = None,
                 eos_timeout_s: float = 10.0, frame_hooks: Sequence[FrameHook] = (),
                 extra_metrics: Callable[[], str] = str) -> None:
        """``extra_metrics``: more Prometheus text for the endpoint (the model server's)."""
        ensure_gst()
        self.plan = plan
        self.console = console or QuietConsole()
        self.metrics_port = metrics_port
        self.eos_timeout_s = eos_timeout_s
        self.frame_hooks = tuple(frame_hooks)
        self.extra_metrics = extra_metrics
        self.metrics: MetricsServer | None = None
        self.pipeline = Gst.Pipeline.new("inferstream")
        self.streams: dict[str, RunStream] = {}
        self._signals = StopSignals()
        self._eos_deadline: float | None = None
        self._playing = False
        self._restart = False
        self._restarts = 0
        self._stopping_for_error = False
        self._batch: dict[str, float] = {}
        self._started = time.monotonic()

    # building ---------------------------------------------------------------------------------------------
    def _build(self) -> None:
        for name in self.plan.rank_boost:
            if (factory := Gst.ElementFactory.find(name)) is not None:
                factory.set_rank(Gst.Rank.PRIMARY + 256)
        for sp in self.plan.streams:
            if sp.output:
                folder = Path(sp.output).parent
                try:
                    folder.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise RunError(f"stream {sp.id}: cannot create the folder {folder} of sink path {sp.output}: "
                                   f"{exc.strerror or exc}; fix sink.path") from None
            stream = self.streams[sp.id] = RunStream(sp, self._make_bin(sp))
            self._attach(stream)

    @staticmethod
    def _make_bin(sp: StreamPlan) -> Gst.Bin:
        try:
            bin_ = Gst.parse_bin_from_description(sp.description, False)
        except GLib.Error as exc:
            raise RunError(f"stream {sp.id}: cannot build its pipeline: {exc.message}") from None
        bin_.set_name(f"stream-{sp.id}")
        return bin_

    def _attach(self, stream: RunStream) -> None:
        """Add the stream's bin to the pipeline with its probes (frame counter, hooks, EOS at each sink)."""
        self.pipeline.add(stream.bin)
        try:
            attach_probes(stream, self.frame_hooks)
        except InferstreamError as exc:
            raise RunError(str(exc)) from None

    # running ----------------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        self._build()
        if self.metrics_port is not None:
            try:
                self.metrics = MetricsServer(self.metrics_port)
            except OSError as exc:
                raise RunError(f"--metrics-port {self.metrics_port}: cannot listen on 127.0.0.1:{self.metrics_port}: "
                               f"{exc.strerror or exc}; choose another port (0: any free one)") from None
            self.console.message(f"metrics: http://127.0.0.1:{self.metrics.port}/metrics")
        self._signals.install()
        try:
            self._restart = self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE
            self._loop()
        finally:
            self._read_batch_stats()
            self.pipeline.set_state(Gst.State.NULL)
            self._drop_empty_outputs()
            self._signals.restore()
            self._read_deliveries()
            final = self._snapshot()
            if self.metrics is not None:
                self.metrics.publish(final, self.extra_metrics())
                self.metrics.close()
            self.console.close(final)
        failed = any(s.counters.status == "failed" for s in self.streams.values())
        lost = any(s.counters.lost_events for s in self.streams.values())
        code = self._signals.exit_code if self._interrupts else EXIT_STREAM_FAILED if failed else \
            EXIT_EVENTS_LOST if lost else EXIT_OK
        outputs = {s.plan.id: s.plan.output for s in self.streams.values() if s.plan.output}
        return RunResult(code, bool(self._interrupts), final, outputs)

    @property
    def _interrupts(self) -> int:
        return self._signals.count

    def interrupt(self) -> None:
        """What a Ctrl-C does (the first finishes the streams, a second stops now), for a caller that handles the
        signals itself: a worker process, whose signal may come before ``run`` installs the handler."""
        self._signals.request()

    def _read_deliveries(self) -> None:
        """Each stream's message delivery, from its (stopped) pymsgbroker: losses go in the summary and exit code."""
        for s in self.streams.values():
            delivery = read_delivery(s.bin.get_by_name(s.plan.broker)) if s.plan.broker else None
            if delivery is not None:
                s.counters.lost_events, s.counters.events_note = delivery.lost, delivery.note()

    def _loop(self) -> None:
        bus = self.pipeline.get_bus()
        while True:
            msg = bus.timed_pop(TICK_NS)
            while msg is not None:
                self._handle(msg)
                msg = bus.pop()
            if self._restart:
                self._restart_remaining()
            name = self._signals.name
            if self._interrupts >= 2:
                self.console.message(f"second {name}: stopping now (files may be incomplete)", error=True)
                self._finish_all("stopped")
                return
            if self._interrupts and not self._started_flowing():
                self.console.message(f"{name} before the pipeline started: stopping")
                self._finish_all("stopped", "interrupted before it started")
                return
            if self._interrupts == 1 and self._eos_deadline is None:
                self.console.message(f"{name}: finishing the streams (up to {self.eos_timeout_s:g} s; "
                                     f"{self._signals.again} to abort)")
                self._send_eos()
            self._update_statuses()
            if all(s.counters.finished for s in self.streams.values()):
                return
            if self._eos_deadline is not None and time.monotonic() > self._eos_deadline:
                self.console.message("streams did not finish in time after EOS: stopping", error=True)
                self._finish_all("stopped", f"did not finish within {self.eos_timeout_s:g} s of EOS")
                return
            snap = self._snapshot()
            self.console.update(snap)
            if self.metrics is not None:
                self.metrics.publish(snap, self.extra_metrics())

    def _started_flowing(self) -> bool:
        """PLAYING reached, or frames already flow (a live pipeline whose encoder has not output yet)."""
        return self._playing or any(s.counters.frames for s in self.streams.values())

    def _live_streams(self) -> list[RunStream]:
        return [s for s in self.streams.values() if not s.removed and not s.counters.finished]

    def _update_statuses(self) -> None:
        ended = "stopped" if self._interrupts or self._stopping_for_error else "done"
        for s in self._live_streams():
            c = s.counters
            if c.eos_sinks.issuperset(s.plan.sinks):
                c.finish(ended)
            elif c.status == "starting" and c.frames:
                c.status = "running"
            if c.duration_ns is None and not s.plan.live and c.status == "running" and s.duration_queries < 30:
                s.duration_queries += 1  # some sources never know their duration: stop asking after 3 s
                self._query_duration(s)
        self._read_batch_stats()

    def _read_batch_stats(self) -> None:
        """The primary batch-groups' stats (one per ``infer.instances``) merged, each read from any of its pyinfers
        still in the pipeline."""
        from inferstream.app.workerstats import merge_batches

        readers = {}
        for s in self.streams.values():
            if not s.removed and s.plan.group not in readers:
                readers[s.plan.group] = s.bin.get_by_name(s.plan.infer)
        stats = []
        for infer in (r for r in readers.values() if r is not None):
            try:
                stats.append(json.loads(infer.get_property("stats") or "{}"))
            except (TypeError, ValueError):
                continue
        self._batch = merge_batches(stats) or self._batch

    @staticmethod
    def _query_duration(stream: RunStream) -> None:
        entry = stream.bin.get_by_name(stream.plan.entry)
        ok, duration = entry.get_static_pad("sink").peer_query_duration(Gst.Format.TIME)
        if ok and duration > 0:
            stream.counters.duration_ns = duration

    def _snapshot(self) -> Snapshot:
        return snapshot([s.counters for s in self.streams.values()], self._batch, self._started)

    # bus messages -----------------------------------------------------------------------------------------
    def _owner(self, obj: Gst.Object | None) -> tuple[str, RunStream | None]:
        """Who posted: ("stream", its stream), ("pipeline", None) or ("gone", None) for a removed bin."""
        while obj is not None and obj is not self.pipeline:
            parent = obj.get_parent()
            if parent is self.pipeline:
                stream = self.streams.get(obj.get_name().removeprefix("stream-"))
                return ("stream", stream) if stream is not None and not stream.removed else ("gone", None)
            obj = parent
        return ("pipeline", None) if obj is self.pipeline else ("gone", None)

    def _handle(self, msg: Gst.Message) -> None:
        kind = msg.type
        if kind == Gst.MessageType.STATE_CHANGED and msg.src is self.pipeline:
            _, new, _ = msg.parse_state_changed()
            self._playing = self._playing or new == Gst.State.PLAYING
        elif kind == Gst.MessageType.EOS:
            for s in self._live_streams():
                s.counters.eos_sinks.update(s.plan.sinks)
        elif kind in (Gst.MessageType.ERROR, Gst.MessageType.WARNING, Gst.MessageType.QOS):
            owner, stream = self._owner(msg.src)
            if owner == "gone":
                return  # from a bin already removed
            if kind == Gst.MessageType.QOS:
                if stream is not None:
                    self._on_qos(stream, msg)
            elif kind == Gst.MessageType.WARNING:
                self._on_warning(stream, msg)
            elif stream is None:
                err, debug = msg.parse_error()
                raise RunError(f"pipeline error: {err.message} ({_last_line(debug)})")
            else:
                self._on_stream_error(stream, msg)

    @staticmethod
    def _on_qos(stream: RunStream, msg: Gst.Message) -> None:
        stream.counters.late += 1
        _fmt, _processed, dropped = msg.parse_qos_stats()
        if dropped >= 0:
            stream.qos_dropped[msg.src.get_name()] = int(dropped)
            stream.counters.dropped = sum(stream.qos_dropped.values())

    def _on_warning(self, stream: RunStream | None, msg: Gst.Message) -> None:
        err, _debug = msg.parse_warning()
        text = f"{err.message}"
        target = stream.warnings if stream else set()
        if text not in target:
            target.add(text)
            who = f"stream {stream.plan.id}" if stream else "pipeline"
            self.console.message(f"{who}: warning: {text}")

    def _on_stream_error(self, stream: RunStream, msg: Gst.Message) -> None:
        err, debug = msg.parse_error()
        detail = _last_line(debug)
        same = detail.split(": ", 1)[-1] in err.message  # "SomeError: <the message again>"
        text = err.message + (f" ({detail})" if detail and not same else "")
        where = f"{stream.plan.kind} {stream.plan.target}"
        stream.counters.finish("failed", text)
        self.console.message(f"stream {stream.plan.id} ({where}) failed: {text}", error=True)
        self._remove(stream)
        # an error before PLAYING fails the pipeline's pending state change: nothing flows until a restart
        start_failed = not self._playing and self.pipeline.get_state(0)[0] == Gst.StateChangeReturn.FAILURE
        if self.plan.on_stream_error == "stop" and not self._stopping_for_error:
            self.console.message("on-stream-error: stop: finishing the other streams", error=True)
            self._stopping_for_error = True
            if start_failed:
                self._finish_all("stopped", f"not run: stream {stream.plan.id} failed (on-stream-error: stop)")
            else:
                self._send_eos()
        elif start_failed:
            self._restart = True

    def _remove(self, stream: RunStream) -> None:
        stream.removed = True
        stream.bin.set_state(Gst.State.NULL)
        self.pipeline.remove(stream.bin)

    def _restart_remaining(self) -> None:
        """Start the remaining streams again, in fresh bins: a bin that failed before PLAYING leaves the pipeline's
        state change failed, and a used bin's decodebin would not relink its new pads (parse-launch links once)."""
        self._restart = False
        if not self._live_streams():
            return
        self._restarts += 1
        if self._restarts > len(self.streams):
            raise RunError("the pipeline failed to start and no stream reported why (run with GST_DEBUG=3)")
        self.pipeline.set_state(Gst.State.NULL)
        for s in self._live_streams():
            self.pipeline.remove(s.bin)
            s.bin = self._make_bin(s.plan)
            self._attach(s)
            s.counters.reset()
            s.counters.status = "starting"
            s.hook_index = 0
        self._restart = self.pipeline.set_state(Gst.State.PLAYING) == Gst.StateChangeReturn.FAILURE

    # stopping ---------------------------------------------------------------------------------------------
    def _send_eos(self) -> None:
        """EOS into each stream right after decoding, so inference, encoders and muxers finish their files."""
        self._eos_deadline = time.monotonic() + self.eos_timeout_s
        for s in self._live_streams():
            pad = s.bin.get_by_name(s.plan.entry).get_static_pad("sink")
            # send_event waits for the streaming thread's lock: never block the bus loop on it
            threading.Thread(target=pad.send_event, args=(Gst.Event.new_eos(),), daemon=True,
                             name=f"eos-{s.plan.id}").start()

    def _finish_all(self, status: str, note: str | None = None) -> None:
        for s in self._live_streams():
            s.counters.finish(status, note)

    def _drop_empty_outputs(self) -> None:
        """A stream that ended without EOS and without a single frame leaves no unplayable MP4 behind."""
        for s in self.streams.values():
            out = Path(s.plan.output) if s.plan.output else None
            finished = s.counters.eos_sinks.issuperset(s.plan.sinks)
            if out is not None and out.is_file() and not finished and s.counters.frames == 0:
                out.unlink()


def _last_line(debug: str | None) -> str:
    lines = [ln.strip() for ln in (debug or "").splitlines() if ln.strip()]
    return lines[-1] if lines else ""
