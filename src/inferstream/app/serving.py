"""``infer.model-server``: the run's model in one process of its own, shared by every worker
(``inferstream.model_server``).

With a copy of the model in each worker, a GPU runs each worker's batches on their own, as small as a worker's
share of the streams; the model server runs the batches of all workers that are waiting as one forward. The run
starts it before the workers, in a private folder (its socket is the access control), waits for it to say it is
ready, points every worker's pyinfer at it (``model=ipc://...``; the server applies the model, device, precision,
backend and graph options) and stops it after the workers have ended. A server that cannot load the model fails
the run with its own one line. One that ends during the run is said and started again (``worker-restarts``
times): the workers wait for it at the socket and send it the batches it lost, so no frame is lost; with no
restarts left the workers' batches fail.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Any, Final

from inferstream.app.children import describe_exit, last_line, relay_stderr
from inferstream.app.config import AppConfig
from inferstream.app.metrics import metric_lines
from inferstream.app.runner import RunError

READY_TIMEOUT_S: Final = 180.0  # loading a model (and torch) on a busy machine
STOP_TIMEOUT_S: Final = 10.0
RECONNECT_S: Final = 60.0  # how long workers wait for a server that ended, while it may be started again
# pyinfer properties that the server applies; the workers' elements get the socket instead
SERVER_OPTIONS: Final = ("model", "device", "precision", "backend", "graph", "trust-checkpoint")
PRIORITY_ENV: Final = "CUDA_MPS_CLIENT_PRIORITY"  # NVIDIA MPS: 0 normal, 1 below normal, read when CUDA starts
# what the server counts, in its stats lines and its last line
COUNTS: Final = ("frames", "forwards", "busy_s", "device_s", "queued", "requests", "request_s", "decodes", "decode_s")


def server_command(cfg: AppConfig, socket: Path) -> list[str]:
    """The ``python -m inferstream.model_server`` command line for ``cfg``'s primary model."""
    assert cfg.infer.model_server is not None
    props = cfg.infer.properties
    command = [sys.executable, "-m", "inferstream.model_server", "--listen", str(socket), "--die-with-parent",
               "--max-batch", str(cfg.infer.model_server.max_batch),
               "--delay-ms", str(cfg.infer.model_server.delay_ms),
               "--capture", cfg.infer.model_server.capture,
               "--mps-priority", "below-normal" if cfg.infer.model_server.mps_priority == "below-normal" else "normal"]
    for key in SERVER_OPTIONS:
        if key == "trust-checkpoint":
            command += ["--trust-checkpoint"] if props.get(key) in (True, "true", "1") else []
        elif key in props:
            command += [f"--{key}", str(props[key])]
    return command


def served_config(cfg: AppConfig, socket: Path, reconnect_s: float = 0) -> AppConfig:
    """``cfg`` with its primary pyinfer pointed at the server's socket (waiting ``reconnect_s`` for a server that
    went away), without the options the server applies."""
    props = {k: v for k, v in cfg.infer.properties.items() if k not in SERVER_OPTIONS or k == "device"}
    spec = f"ipc://{socket}" + (f"?reconnect={reconnect_s:g}" if reconnect_s else "")
    infer = type(cfg.infer).model_validate({**props, "model": spec, "instances": cfg.infer.instances,
                                            "secondary": cfg.infer.secondary})
    return cfg.model_copy(update={"infer": infer})


@contextlib.contextmanager
def model_server(cfg: AppConfig, say: Callable[[str], None]) -> Iterator[tuple[AppConfig, Callable[[], str]]]:
    """Run the block with ``cfg``'s model server up, or as it is. Yields the config the workers get and the
    server's metrics in the Prometheus text format (empty without a server)."""
    if cfg.infer.model_server is None:
        yield cfg, str
        return
    folder = Path(tempfile.mkdtemp(prefix="inferstream-server-"))  # mode 0700: only this user connects
    server = _Server(server_command(cfg, folder / "model.sock"), cfg.worker_restarts, say)
    try:
        device = server.start()
        say(f"model server: {cfg.infer.properties.get('model')} on {device}, batches of up to "
            f"{cfg.infer.model_server.max_batch} frames from every worker")
        threading.Thread(target=server.watch, daemon=True, name="model-server-watch").start()
        reconnect = RECONNECT_S if cfg.worker_restarts else 0
        with _clients_below_normal(cfg.infer.model_server.mps_priority == "workers-below-normal"):
            yield served_config(cfg, folder / "model.sock", reconnect), server.metrics
    finally:
        counts = server.stop()
        if counts.get("forwards"):
            at_server = (f", a request {1000 * counts['request_s'] / counts['requests']:.1f} ms at the server"
                         if counts.get("requests") else "")
            say(f"model server: {counts['frames']:.0f} frames in {counts['forwards']:.0f} forwards "
                f"({counts['frames'] / counts['forwards']:.1f} per forward{at_server})")
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _clients_below_normal(below: bool) -> Iterator[None]:
    """With ``below``, every CUDA process started in the block (the workers; this process, where it runs the
    pipeline itself and CUDA has not started yet) is a below-normal MPS client, so the server's forwards, which
    bound a served run, go first. The server sets its own priority (``--mps-priority``), restarted or not."""
    before = os.environ.get(PRIORITY_ENV)
    if below:
        os.environ[PRIORITY_ENV] = "1"
    try:
        yield
    finally:
        if below:
            if before is None:
                os.environ.pop(PRIORITY_ENV, None)
            else:
                os.environ[PRIORITY_ENV] = before


class _Server:
    """The server process, started again (``restarts`` times) when it ends during the run."""

    def __init__(self, command: list[str], restarts: int, say: Callable[[str], None]) -> None:
        self.command, self.max_restarts, self.say = command, restarts, say
        self.stopping = threading.Event()
        self.stderr: deque[str] = deque(maxlen=20)
        # the counts of the servers that ended before the last one, and the running server's last stats line
        self.ended: dict[str, float] = dict.fromkeys(COUNTS, 0)
        self.live: dict[str, float] = {}
        self.restarts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.said: Queue[dict[str, Any] | None] = Queue()

    def start(self) -> str:
        """Start it and wait until it is ready; the device it runs on. RunError: it is not."""
        self.said = Queue()  # its JSON lines; None once its stdout ends
        # its own session: a Ctrl-C in the terminal reaches the parent only, which stops the server after the workers
        self.proc = proc = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            start_new_session=True)
        assert proc.stdout is not None and proc.stderr is not None
        threading.Thread(target=relay_stderr, args=(proc.stderr, self.stderr), daemon=True,
                         name="model-server-stderr").start()
        self.live = {}
        threading.Thread(target=_read_lines, args=(proc.stdout, self.said, self), daemon=True,
                         name="model-server-stdout").start()
        try:
            message = self.said.get(timeout=READY_TIMEOUT_S)
        except Empty:
            proc.kill()
            raise RunError(f"the model server was not ready in {READY_TIMEOUT_S:g} s") from None
        if message is None or "ready" not in message:  # it ended before it was ready
            proc.wait()
            time.sleep(0.1)  # its last stderr lines
            raise RunError(last_line(self.stderr) or f"the model server {describe_exit(proc.returncode)} before it "
                           "was ready")
        return str(message.get("device"))

    def watch(self) -> None:
        """Until the run stops: a server that ends is said, and started again while restarts are left."""
        while self.proc is not None:
            rc = self.proc.wait()
            if self.stopping.is_set():
                return
            how = describe_exit(rc, self.stderr)
            if self.restarts >= self.max_restarts:
                self.say(f"model server {how} during the run, no restarts left: the workers' batches fail")
                return
            self.restarts += 1
            self._count()
            self.say(f"model server {how} during the run: starting it again (the workers wait for it)")
            try:
                self.start()
            except RunError as exc:
                self.say(f"model server could not be started again: {exc}")
                return

    def stop(self) -> dict[str, float]:
        """Stop it; the counts (``COUNTS``) of every server of the run."""
        self.stopping.set()
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._count()
        return dict(self.ended)

    def metrics(self) -> str:
        """The server's health and counts, in the Prometheus text format."""
        up = float(self.proc is not None and self.proc.poll() is None)
        live = self.live if up else {}
        total = {key: ended + live.get(key, 0) for key, ended in self.ended.items()}
        return "\n".join([
            *metric_lines("model_server_up", "gauge", "1 while the model server runs", [("", up)]),
            *metric_lines("model_server_restarts_total", "counter", "Times the model server was started again",
                          [("", self.restarts)]),
            *metric_lines("model_server_forwards_total", "counter", "Forwards the model server ran (every batch of "
                          "every worker that waited went into one)", [("", total["forwards"])]),
            *metric_lines("model_server_frames_total", "counter", "Frames through the model server",
                          [("", total["frames"])]),
            *metric_lines("model_server_busy_seconds_total", "counter", "Seconds the model server spent in "
                          "forwards (its rate is how busy the model is: near 1, the GPU bounds the run)",
                          [("", total["busy_s"])]),
            *metric_lines("model_server_device_seconds_total", "counter", "Seconds the device took for those forwards, "
                          "timed on it (CUDA events; on the CPU the same as busy): busy minus this is the host's share",
                          [("", total["device_s"])]),
            *metric_lines("model_server_queued_forwards_total", "counter", "Forwards launched behind one still "
                          "running (the device went on to them without waiting for the server's host work)",
                          [("", total["queued"])]),
            *metric_lines("model_server_requests_total", "counter", "Workers' requests the model server answered "
                          "after a forward", [("", total["requests"])]),
            *metric_lines("model_server_request_seconds_total", "counter", "Those requests' time at the server, "
                          "from arrival to answer: over requests_total, the mean; the rest of a worker's round trip "
                          "is the way there and back", [("", total["request_s"])]),
            *metric_lines("model_server_decodes_total", "counter", "Decoding calls at the model server (each decodes "
                          "the rows of every forward that ended while the one before it ran)", [("", total["decodes"])]),
            *metric_lines("model_server_decode_seconds_total", "counter", "Seconds the model server's decoding thread "
                          "spent in those calls (near 1 a second, decoding bounds the run)", [("", total["decode_s"])]),
            *metric_lines("model_server_workers", "gauge", "Batch-groups connected to the model server",
                          [("", live.get("workers", 0))]),
        ]) + "\n"

    def _count(self) -> None:
        """Add the counts the ended server said (a killed one says none)."""
        with contextlib.suppress(Empty):
            while (message := self.said.get(timeout=1.0)) is not None:
                if "forwards" in message:
                    for key in COUNTS:
                        self.ended[key] += message.get(key, 0)


def _read_lines(stream: IO[bytes], said: Queue[dict[str, Any] | None], server: _Server) -> None:
    """The server's JSON lines: its stats go to ``server.live``, its notes to the console, the rest to ``said``; None
    at its end."""
    with stream:
        for line in stream:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and isinstance(message.get("stats"), dict):
                    server.live = message["stats"]
                elif isinstance(message, dict) and isinstance(message.get("note"), str):
                    server.say(f"model server: {message['note']}")  # e.g. how long its graphs took to capture
                elif isinstance(message, dict):
                    said.put(message)
    said.put(None)

