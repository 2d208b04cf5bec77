"""One worker process of ``inferstream run --workers N``: runs its shard's :class:`Plan` with the in-process
:class:`Runner` and reports to the supervising parent (``app/workers.py``) over a pipe.

    python -m inferstream.app.worker FD      # the shard's plan and settings as JSON on stdin

Wire format: one JSON object per line on file descriptor FD, each with one key: ``ready`` first (signals are
handled from now on: the parent sends none before), ``snapshot`` (the runner's
:class:`Snapshot`, a few times a second and once at the end, with ``at``: when, on the host's monotonic clock,
which all processes share), ``message`` (``[text, error]``, what the runner's
console would print), ``fatal`` (the run failed as a whole: a :class:`RunError`) and last ``exit`` (the runner's
exit code). A worker that ends without ``exit`` died. A cluster's worker (``app/clusterworker.py``, a Ray actor)
sends the same items through its actor calls.

Signals: the parent owns them. SIGINT is the runner's Ctrl-C (the first finishes the streams, a second stops now),
also when it arrives before the runner runs. The worker asks the kernel for a SIGUSR2 when the parent dies and
takes it as one Ctrl-C, so its files are finished even then: not SIGINT itself, because the kernel may send it more
than once (once for each thread of the dying parent that the worker is handed to as it exits), and a second Ctrl-C
stops without finishing the files.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any, Final

from inferstream.app.metrics import Snapshot, StreamView
from inferstream.native.process import die_with_parent, discard_output

if TYPE_CHECKING:
    from inferstream.app.pipeline import Plan
    from inferstream.app.runner import Runner

SNAPSHOT_EVERY_S: Final = 0.25
PARENT_DIED: Final = signal.SIGUSR2  # what the kernel sends a worker when its parent dies (PR_SET_PDEATHSIG)


def encode_snapshot(snap: Snapshot) -> dict[str, Any]:
    return dataclasses.asdict(snap)


def decode_snapshot(data: dict[str, Any]) -> Snapshot:
    streams = tuple(StreamView(**view) for view in data["streams"])
    return Snapshot(data["elapsed_s"], streams, dict(data["batch"]), data["active_s"])


def encode_plan(plan: Plan) -> dict[str, Any]:
    return dataclasses.asdict(plan)


def decode_plan(data: dict[str, Any]) -> Plan:
    from inferstream.app.pipeline import Plan, StreamPlan

    def fields(d: dict[str, Any]) -> dict[str, Any]:
        return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    streams = tuple(StreamPlan(**fields(s)) for s in data["streams"])
    return Plan(**{**fields({k: v for k, v in data.items() if k != "streams"}), "streams": streams})


class ReportConsole:
    """The runner's console in a worker: hands what it would show to the supervisor (which draws one for all) as
    the wire format's items; ``send`` delivers one (a pipe here, a Ray actor's queue in ``app/clusterworker.py``)."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        self._next = 0.0

    def send(self, **item: Any) -> None:
        self._send(item)

    def update(self, snap: Snapshot) -> None:
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + SNAPSHOT_EVERY_S
            self.send(snapshot=encode_snapshot(snap), at=time.monotonic())

    def message(self, text: str, error: bool = False) -> None:
        self.send(message=[text, error])

    def close(self, snap: Snapshot) -> None:
        self.send(snapshot=encode_snapshot(snap), at=time.monotonic())


def pipe_sender(out: IO[str]) -> Callable[[dict[str, Any]], None]:
    """Items as JSON lines on ``out``, whole lines from any thread; nothing once the parent is gone."""
    lock = threading.Lock()

    def send(item: dict[str, Any]) -> None:
        line = json.dumps(item) + "\n"
        with lock:
            try:
                out.write(line)
                out.flush()
            except (BrokenPipeError, ValueError):  # the parent is gone (ValueError: closed here): nobody to tell
                pass
    return send


def report_run(runner: Runner, console: ReportConsole) -> int:
    """Run the shard to its end and report how it ended: ``fatal`` when it failed as a whole, then ``exit``."""
    from inferstream.errors import InferstreamError

    try:
        code: int = runner.run().exit_code
    except InferstreamError as exc:
        console.send(fatal=str(exc))
        code = 1
    console.send(exit=code)
    return code


class _ForgivingStream:
    """stderr that never raises: once the parent is gone, any thread's write into its pipe would raise EPIPE
    (until the parent-death handler, on the main thread, has sent stderr to /dev/null)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    runner: Runner | None = None
    early: list[int] = []

    orphaned: list[int] = []

    def on_sigint(_signum: int, _frame: object) -> None:
        if runner is None:
            early.append(1)
        else:
            runner.interrupt()

    def on_parent_death(signum: int, frame: object) -> None:
        """The kernel's word that the parent died: finish the files, as after one Ctrl-C, and only once."""
        discard_output(sys.stderr)  # nobody reads it any more
        if not orphaned:
            orphaned.append(1)
            on_sigint(signum, frame)
    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(PARENT_DIED, on_parent_death)  # not a stop signal of the runner's: this handler stays
    sys.stderr = _ForgivingStream(sys.stderr)
    die_with_parent(PARENT_DIED)
    with os.fdopen(int(args[0]), "w") as out:
        console = ReportConsole(pipe_sender(out))
        console.send(ready=os.getpid())
        spec = json.load(sys.stdin)
        from inferstream.app.runner import Runner

        runner = Runner(decode_plan(spec["plan"]), console, None, float(spec["eos_timeout_s"]))
        for _ in early:
            runner.interrupt()
        return report_run(runner, console)


if __name__ == "__main__":
    sys.exit(main())
