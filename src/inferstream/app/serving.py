"""``infer.model-server``: the run's model in one process of its own, shared by every worker
(``inferstream.model_server``).

With a copy of the model in each worker, a GPU runs each worker's batches on their own, as small as a worker's
share of the streams; the model server runs the batches of all workers that are waiting as one forward. The run
starts it before the workers, in a private folder (its socket is the access control), waits for it to say it is
ready, points every worker's pyinfer at it (``model=ipc://...``; the server applies the model, device, precision,
backend and graph options) and stops it after the workers have ended. A server that cannot load the model fails
the run with its own one line; one that dies during the run is said at once (the workers' batches then fail).
"""
from __future__ import annotations

import contextlib
import json
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

from inferstream.app.config import AppConfig
from inferstream.app.runner import RunError
from inferstream.app.signals import describe_exit

READY_TIMEOUT_S: Final = 180.0  # loading a model (and torch) on a busy machine
STOP_TIMEOUT_S: Final = 10.0
# pyinfer properties that the server applies; the workers' elements get the socket instead
SERVER_OPTIONS: Final = ("model", "device", "precision", "backend", "graph", "trust-checkpoint")


def server_command(cfg: AppConfig, socket: Path) -> list[str]:
    """The ``python -m inferstream.model_server`` command line for ``cfg``'s primary model."""
    assert cfg.infer.model_server is not None
    props = {k.replace("_", "-"): v for k, v in cfg.infer.properties.items()}
    command = [sys.executable, "-m", "inferstream.model_server", "--listen", str(socket),
               "--max-batch", str(cfg.infer.model_server.max_batch),
               "--delay-ms", str(cfg.infer.model_server.delay_ms)]
    for key in SERVER_OPTIONS:
        if key == "trust-checkpoint":
            command += ["--trust-checkpoint"] if props.get(key) in (True, "true", "1") else []
        elif key in props:
            command += [f"--{key}", str(props[key])]
    return command


def served_config(cfg: AppConfig, socket: Path) -> AppConfig:
    """``cfg`` with its primary pyinfer pointed at the server's socket, without the options the server applies."""
    props = {k: v for k, v in cfg.infer.properties.items()
             if k.replace("_", "-") not in SERVER_OPTIONS or k.replace("_", "-") == "device"}
    infer = type(cfg.infer).model_validate({**props, "model": f"ipc://{socket}", "instances": cfg.infer.instances,
                                            "secondary": cfg.infer.secondary})
    return cfg.model_copy(update={"infer": infer})


@contextlib.contextmanager
def model_server(cfg: AppConfig, say: Callable[[str], None]) -> Iterator[AppConfig]:
    """Run the block with ``cfg``'s model server up (the config the workers get is yielded), or as it is."""
    if cfg.infer.model_server is None:
        yield cfg
        return
    folder = Path(tempfile.mkdtemp(prefix="inferstream-server-"))  # mode 0700: only this user connects
    socket = folder / "model.sock"
    proc = subprocess.Popen(server_command(cfg, socket), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    stderr: deque[str] = deque(maxlen=20)
    said: Queue[dict[str, Any] | None] = Queue()  # its JSON lines; None once its stdout ends
    threading.Thread(target=_keep_tail, args=(proc.stderr, stderr), daemon=True, name="model-server-stderr").start()
    threading.Thread(target=_read_lines, args=(proc.stdout, said), daemon=True, name="model-server-stdout").start()
    stopping = threading.Event()
    try:
        ready = _wait_ready(proc, said, stderr)
        say(f"model server: {cfg.infer.properties.get('model')} on {ready.get('device')}, batches of up to "
            f"{cfg.infer.model_server.max_batch} frames from every worker")
        threading.Thread(target=_watch, args=(proc, stopping, stderr, say), daemon=True,
                         name="model-server-watch").start()
        yield served_config(cfg, socket)
    finally:
        stopping.set()
        counts = _stop(proc, said)
        if counts.get("forwards"):
            say(f"model server: {counts['frames']} frames in {counts['forwards']} forwards "
                f"({counts['frames'] / counts['forwards']:.1f} per forward)")
        shutil.rmtree(folder, ignore_errors=True)


def _keep_tail(stream: IO[bytes], tail: deque[str]) -> None:
    with stream:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            print(line, file=sys.stderr)  # the server's own messages, as a worker's


def _read_lines(stream: IO[bytes], said: Queue[dict[str, Any] | None]) -> None:
    with stream:
        for line in stream:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict):
                    said.put(message)
    said.put(None)


def _wait_ready(proc: subprocess.Popen[bytes], said: Queue[dict[str, Any] | None], stderr: deque[str]
                ) -> dict[str, Any]:
    try:
        message = said.get(timeout=READY_TIMEOUT_S)
    except Empty:
        proc.kill()
        raise RunError(f"the model server was not ready in {READY_TIMEOUT_S:g} s") from None
    if message is None or "ready" not in message:  # it ended before it was ready
        proc.wait()
        time.sleep(0.1)  # its last stderr lines
        raise RunError(_last(stderr) or f"the model server exited with code {proc.returncode} before it was ready")
    return message


def _watch(proc: subprocess.Popen[bytes], stopping: threading.Event, stderr: deque[str],
           say: Callable[[str], None]) -> None:
    rc = proc.wait()
    if not stopping.is_set():
        say(f"model server {describe_exit(rc, stderr)} during the run: the workers' batches fail from here")


def _stop(proc: subprocess.Popen[bytes], said: Queue[dict[str, Any] | None]) -> dict[str, Any]:
    """Stop the server; its last line of counts, if it said one."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    counts: dict[str, Any] = {}
    with contextlib.suppress(Empty):
        while (message := said.get(timeout=1.0)) is not None:
            counts = message if "forwards" in message else counts
    return counts


def _last(tail: deque[str]) -> str:
    return next((line for line in reversed(tail) if line.strip()), "")
