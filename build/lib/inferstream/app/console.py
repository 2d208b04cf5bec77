"""What a run shows while it goes: a live table with rich when installed and on a terminal, else plain lines.

Every console has ``update(snapshot)`` (called a few times a second; each decides how often to draw),
``message(text, error)`` for events (a stream failed, Ctrl-C) and ``close(snapshot)`` which prints the summary.
Whatever they print has conn-str passwords replaced by ``***``.
"""
from __future__ import annotations

import importlib.util
import sys
import time
from typing import TYPE_CHECKING, Protocol, TextIO

from inferstream.batching.slots import STAGES
from inferstream.messaging.brokers.base import redact_credentials

if TYPE_CHECKING:
    from rich.table import Table

    from inferstream.app.metrics import Snapshot, StreamView


class Console(Protocol):
    def update(self, snap: Snapshot) -> None: ...
    def message(self, text: str, error: bool = False) -> None: ...
    def close(self, snap: Snapshot) -> None: ...


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _progress(s: StreamView) -> str:
    return "-" if s.progress is None else f"{100 * s.progress:.0f}%"


def _batch(snap: Snapshot) -> str:
    b = snap.batch
    if not b.get("batches"):
        return "batch: -"
    return (f"batch fill {b.get('mean-fill', 0):.2f}, wait {b.get('mean-wait-ms', 0):.0f} ms, "
            f"infer {b.get('mean-infer-ms', 0):.0f} ms/batch")


def summary_lines(snap: Snapshot) -> list[str]:
    """The end-of-run report: one line per stream plus totals."""
    width = max([6] + [len(s.id) for s in snap.streams])
    lines = [f"{'stream':<{width}}  {'status':<8} {'frames':>7} {'fps':>7}  note"]
    for s in snap.streams:
        note = s.error or (f"{s.dropped} dropped, {s.late} late (QoS)" if s.late or s.dropped else "")
        note = redact_credentials("; ".join(n for n in (note, s.events_note) if n))
        lines.append(f"{s.id:<{width}}  {s.status:<8} {s.frames:>7} {s.fps:>7.1f}  {note}")
    fps = snap.total_frames / snap.active_s if snap.active_s > 0 else 0.0
    startup = snap.elapsed_s - snap.active_s
    lines.append(f"total: {snap.total_frames} frames in {snap.active_s:.1f} s ({fps:.1f} fps) after "
                 f"{startup:.1f} s of startup; {_batch(snap)}")
    stages = [f"{stage} {snap.batch[key]:.1f}" for stage in STAGES if (key := f"mean-{stage}-ms") in snap.batch]
    if snap.batch.get("batches") and stages:
        lines.append(f"a batch's time: {', '.join(stages)} ms")
    return lines


class QuietConsole:
    def __init__(self, out: TextIO | None = None, summary: bool = True) -> None:
        self.out = out or sys.stdout
        self.summary = summary

    def update(self, snap: Snapshot) -> None:
        pass

    def message(self, text: str, error: bool = False) -> None:
        print(redact_credentials(text), file=sys.stderr if error else self.out, flush=True)

    def close(self, snap: Snapshot) -> None:
        if self.summary:
            print("\n".join(summary_lines(snap)), file=self.out, flush=True)


class PlainConsole(QuietConsole):
    """One status line every ``interval_s`` seconds."""

    def __init__(self, interval_s: float = 2.0, out: TextIO | None = None) -> None:
        super().__init__(out)
        self.interval_s = interval_s
        self._next = time.monotonic() + interval_s

    def update(self, snap: Snapshot) -> None:
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.interval_s
        parts = []
        for s in snap.streams:
            eta = f" ETA {fmt_duration(s.eta_s)}" if s.eta_s is not None else ""
            prog = f" {_progress(s)}" if s.progress is not None else ""
            qos = f" drop {s.dropped}/late {s.late}" if s.late or s.dropped else ""
            parts.append(f"{s.id} {s.status} {s.frames}f {s.fps:.1f}fps{prog}{eta}{qos}")
        print(f"[{fmt_duration(snap.elapsed_s)}] {snap.total_fps:.1f} fps | " + " | ".join(parts)
              + f" | {_batch(snap)}", file=self.out, flush=True)


class RichConsole(QuietConsole):
    """A live-updating table (rich.live.Live), redrawn at most 4 times a second."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console as RConsole
        from rich.live import Live

        self._console = RConsole()
        self._live = Live(console=self._console, auto_refresh=False, transient=True)
        self._live.start()
        self._last = 0.0

    def _table(self, snap: Snapshot) -> Table:
        from rich.table import Table

        table = Table(title=f"inferstream  {fmt_duration(snap.elapsed_s)}  {snap.total_fps:.1f} fps total",
                      caption=_batch(snap))
        for col in ("stream", "status", "frames", "fps", "progress", "ETA", "dropped", "late"):
            table.add_column(col, justify="left" if col in ("stream", "status") else "right")
        colour = {"running": "green", "done": "blue", "failed": "red", "stopped": "yellow"}
        for s in snap.streams:
            status = f"[{colour.get(s.status, 'white')}]{s.status}[/]"
            table.add_row(s.id, status, str(s.frames), f"{s.fps:.1f}", _progress(s), fmt_duration(s.eta_s),
                          str(s.dropped), str(s.late))
        return table

    def update(self, snap: Snapshot) -> None:
        if time.monotonic() - self._last >= 0.25:
            self._last = time.monotonic()
            self._live.update(self._table(snap), refresh=True)

    def message(self, text: str, error: bool = False) -> None:
        self._console.print(redact_credentials(text), style="red" if error else None, markup=False,
                            highlight=False)

    def close(self, snap: Snapshot) -> None:
        self._live.stop()
        self._console.print(self._table(snap))
        super().close(snap)


def make_console(mode: str = "auto", interval_s: float = 2.0) -> Console:
    """``auto``: rich on a terminal when installed, else plain; ``rich``, ``plain``, ``quiet`` (summary only)."""
    if mode == "quiet":
        return QuietConsole()
    if mode in ("auto", "rich"):
        if importlib.util.find_spec("rich") is None:
            if mode == "rich":
                print("rich is not installed (pip install 'inferstream[app]'): plain output", file=sys.stderr)
        elif mode == "rich" or sys.stdout.isatty():
            return RichConsole()
    return PlainConsole(interval_s)
