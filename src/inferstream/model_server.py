"""One process that holds a model for every worker on its device: batches of all workers in one forward.

    python -m inferstream.model_server --listen /run/x/model.sock --model yolo11s.pt --device cuda [--max-batch 32]

Workers load ``model=ipc:///run/x/model.sock`` (``backends.served``): each registers its input size and batch
size, gets input and output tensors shared with it (CUDA IPC on a GPU, a file in ``/dev/shm`` on the CPU), and
sends ``("run", n)`` once its batch is in its input. The server's one thread takes every request that is waiting,
up to ``max-batch`` frames, runs them as one forward (on a GPU: on the cheapest cover of its frames by the
captured CUDA graphs, ``backends.cuda_graphs``) on its own CUDA stream, copies each worker's outputs into
that worker's tensors, waits for the stream and answers ``("done",)``. It never waits for a batch to fill
(``--delay-ms`` lets it wait that long for workers that have not asked yet): with the GPU busy, requests pile up
while a forward runs, and the next forward takes them all.

The socket's folder is the access control (the app makes it private): whoever can connect can send pickles.
Prints one JSON line ``{"ready": ...}`` once the model is loaded (the app waits for it), ``{"stats": ...}`` every
second (forwards, frames, workers connected: the app's metrics), ``{"note": ...}`` for its console (the graphs
it captured, in how long) and one line of counts at exit; SIGTERM or SIGINT
stops it. With ``--die-with-parent`` (the app's server) the death of the app makes it serve its workers until they
have finished their streams and gone, then end: it is never left running. A model that fails to load is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from inferstream.backends.served import SharedFile
from inferstream.native.process import die_with_parent, discard_output

STATS_EVERY_S: Final = 1.0
DRAIN_S: Final = 60.0

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from inferstream.backends.base import Backend


@dataclass(eq=False)
class _Client:
    conn: Connection
    owner: tuple[int, int] = (0, 0)  # (pid, backend): a backend's lanes are one client of the server's counts
    shape: tuple[int, int, int] = (0, 0, 0)  # capacity, height, width once registered
    input: Tensor | None = None
    outputs: list[Tensor] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    asked: int = 0  # frames of the request waiting to run, 0: none
    asked_at: int = 0  # the request's number: the oldest run first


class ModelServer:
    """The serving loop (see the module docstring); ``serve`` runs it until ``stop``."""

    def __init__(self, backend: Backend, max_batch: int = 32, delay_s: float = 0.0, every_sum: bool = False) -> None:
        """``every_sum``: on a GPU, capture a graph for every sum of whole requests up to ``max_batch``
        (``--capture every-sum``), not only the powers of two."""
        import torch
        import torch.multiprocessing  # registers torch's CUDA IPC reductions with the pickler

        self.backend, self.max_batch, self.delay_s, self.every_sum = backend, max_batch, delay_s, every_sum
        self._stream = torch.cuda.Stream(backend.device) if backend.device.type == "cuda" else None
        # a forward's start and end on the device: how long the GPU itself took, apart from the host around it
        self._timers = ((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                        if self._stream is not None else None)
        self._clients: list[_Client] = []
        self._accepted: list[Connection] = []
        self._accept_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._drain_until = 0.0  # once the parent died: when to end even with workers left
        self._requests = itertools.count()
        self._warm: dict[tuple[int, int], set[int]] = {}  # (height, width): the batch sizes warmed up for
        self._granule = 0  # the registered batch sizes' greatest common divisor: forwards are sums of its multiples
        # CPU tensors live in files both processes map: in memory (/dev/shm) when it has room, else the temp folder
        self._folders = [Path(tempfile.mkdtemp(prefix="inferstream-slots-", dir=d))
                         for d in (("/dev/shm",) if Path("/dev/shm").is_dir() else ()) + (None,)]
        self.forwards = self.frames = 0
        self._owners: set[tuple[int, int]] = set()  # every backend served, for the count at exit
        self.busy_s = 0.0  # in forwards, from the first launch to the stream's end: its rate is how busy the model is
        self.device_s = 0.0  # the same forwards timed on the device (on the CPU: busy_s)

    # the loop ----------------------------------------------------------------------------------------------
    def serve(self, listener: Listener) -> None:
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name="model-server-accept").start()
        said = time.monotonic()
        try:
            while not self._stopping:
                self._read(wait([c.conn for c in self._clients] + [self._wake_r], timeout=STATS_EVERY_S))
                if any(c.asked for c in self._clients):
                    self._linger()
                    self._run_batch()
                if self._drain_until and (not self._clients or time.monotonic() > self._drain_until):
                    break  # the app is gone and so are its workers (or they had their time)
                if time.monotonic() - said >= STATS_EVERY_S:  # for the app's metrics
                    said = time.monotonic()
                    say({"stats": {**self.counts(), "workers": len({c.owner for c in self._clients})}})
        finally:
            listener.close()
            self.close()

    @property
    def served(self) -> int:
        """How many batch groups (a backend with its lanes) this server has answered a hello."""
        return len(self._owners)

    def counts(self) -> dict[str, float]:
        """What the app's metrics add up (``app.serving.COUNTS``)."""
        return {"forwards": self.forwards, "frames": self.frames, "busy_s": self.busy_s, "device_s": self.device_s}

    def close(self) -> None:
        """Let every worker go and remove the shared files."""
        for client in list(self._clients):
            self._drop(client)
        for folder in self._folders:
            shutil.rmtree(folder, ignore_errors=True)

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler)."""
        self._stopping = True
        os.write(self._wake_w, b"x")

    def drain(self) -> None:
        """End once every worker has gone, or after ``DRAIN_S`` (safe from a signal handler): the app that started
        the server died, and its workers are finishing their streams, which needs their last batches."""
        self._drain_until = time.monotonic() + DRAIN_S
        discard_output(sys.stdout, sys.stderr)  # the app read them: a write now would fail the server
        os.write(self._wake_w, b"d")

    def _accept(self, listener: Listener) -> None:
        while not self._stopping:
            try:
                conn = listener.accept()
            except OSError:  # closed at stop
                return
            with self._accept_lock:
                self._accepted.append(conn)
            os.write(self._wake_w, b"c")

    def _read(self, ready: list[Any]) -> None:
        if self._wake_r in ready:
            os.read(self._wake_r, 4096)
            with self._accept_lock:
                self._clients += [_Client(conn) for conn in self._accepted]
                self._accepted.clear()
        for client in [c for c in self._clients if c.conn in ready]:
            try:
                message = client.conn.recv()
            except (EOFError, OSError):
                self._drop(client)
                continue
            self._handle(client, message)

    def _linger(self) -> None:
        """Wait up to ``delay_s`` for registered workers that have not asked yet, while the batch has room."""
        deadline = time.monotonic() + self.delay_s
        while (left := deadline - time.monotonic()) > 0:
            idle = [c for c in self._clients if c.input is not None and not c.asked]
            if not idle or sum(c.asked for c in self._clients) >= self.max_batch:
                return
            self._read(wait([c.conn for c in idle], timeout=left))

    # messages ----------------------------------------------------------------------------------------------
    def _handle(self, client: _Client, message: tuple[Any, ...]) -> None:
        kind, *args = message
        try:
            if kind == "hello":
                client.owner = (int(args[0]), int(args[1]))
                self._owners.add(client.owner)
                dtype = str(self.backend.dtype).removeprefix("torch.")
                self._send(client, ("info", self.backend.info, str(self.backend.device), dtype))
            elif kind == "register":
                self._send(client, ("slots", *self._register(client, *args)))
            elif kind == "run" and client.input is not None and 0 < args[0] <= client.shape[0]:
                client.asked, client.asked_at = int(args[0]), next(self._requests)
            else:
                why = f"unexpected request {kind!r} (register before run, at most the registered batch)"
                self._send(client, ("error", why))
        except Exception as exc:  # noqa: BLE001 (a bad size, a model that fails on it, no memory: that worker's error)
            self._send(client, ("error", f"{type(exc).__name__}: {exc}"))

    def _register(self, client: _Client, capacity: int, height: int, width: int) -> tuple[Any, list[Any]]:
        """Allocate (and share) ``client``'s tensors; the first worker of a size warms the model up for it."""
        import torch

        self._release(client)
        self._warm_up(capacity, height, width)
        probe = torch.zeros((1, 3, height, width), dtype=self.backend.dtype, device=self.backend.device)
        with torch.inference_mode():
            probed = [(tuple(o.shape), o.dtype) for o in self.backend(probe)]
        if any(not shape or shape[0] != 1 for shape, _ in probed):
            raise ValueError(f"outputs {[s for s, _ in probed]} do not all have the batch first: this model "
                             "cannot be served")
        client.input, shared_in = self._tensor(client, (capacity, 3, height, width), self.backend.dtype)
        made = [self._tensor(client, (capacity, *shape[1:]), dtype) for shape, dtype in probed]
        client.outputs = [tensor for tensor, _ in made]
        client.shape = (capacity, height, width)
        if self.backend.device.type == "cuda":
            torch.cuda.synchronize(self.backend.device)
        return shared_in, [shared for _, shared in made]

    def _warm_up(self, capacity: int, height: int, width: int) -> None:
        """Warm the model up for the forwards that requests of ``capacity`` frames make. On a GPU: up to
        ``max_batch`` (or ``capacity`` when larger), which captures the graphs of the powers of two below it and of
        itself; with ``every_sum``, every sum of whole requests too (``request_sums``), so that no forward needs a
        larger graph padded or several; it is said, with the time it took (captures delay every worker's start).
        On the CPU one batch of ``capacity`` readies the lazy parts: there is no graph to capture, and a dummy
        forward of ``max_batch`` frames would only hold every worker's start for its duration."""
        from inferstream.backends.cuda_graphs import request_sums

        top = max(capacity, self.max_batch) if self._stream is not None else capacity
        self._granule = math.gcd(self._granule, capacity)
        warm = self._warm.setdefault((height, width), set())
        if self.every_sum and self._stream is not None:
            sizes = [n for n in request_sums(self._granule, top) if n not in warm]
        else:
            sizes = [] if any(n >= top for n in warm) else [top]
        started = time.monotonic()
        for n in sizes:
            self.backend.warmup(n, (height, width))
            warm.add(n)
        if sizes and self._stream is not None:
            status = getattr(self.backend, "graph_status", "no CUDA graphs")
            say({"note": f"warmed up for batches of {', '.join(map(str, sizes))} at {height}x{width} in "
                         f"{time.monotonic() - started:.1f} s ({status})"})

    def _tensor(self, client: _Client, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[Tensor, Any]:
        """A zeroed tensor for ``client`` and what to send it: the CUDA tensor itself (torch's reduction pickles
        an IPC handle of it), or the file a CPU tensor is mapped from."""
        import torch

        if self.backend.device.type == "cuda":
            tensor = torch.zeros(shape, dtype=dtype, device=self.backend.device)
            return tensor, tensor
        size = dtype.itemsize * math.prod(shape)
        folder = next((f for f in self._folders if _free_bytes(f) > 2 * size), None)
        if folder is None:  # a full tmpfs would kill both processes with SIGBUS when the pages are touched
            raise OSError(f"no room for a {size / 1e6:.0f} MB shared tensor in {' or '.join(map(str, self._folders))}")
        path = folder / f"{id(client):x}-{len(client.files)}"
        client.files.append(path)
        shared = SharedFile(str(path), shape, str(dtype).removeprefix("torch."))
        return shared.open(), shared

    # one forward of every waiting request --------------------------------------------------------------------
    def _run_batch(self) -> None:
        import torch

        jobs: list[_Client] = []  # the oldest requests first, of the oldest request's input size
        for client in sorted((c for c in self._clients if c.asked), key=lambda c: c.asked_at):
            same = not jobs or client.shape[1:] == jobs[0].shape[1:]
            if same and (not jobs or sum(j.asked for j in jobs) + client.asked <= self.max_batch):
                jobs.append(client)
        started = time.perf_counter()
        try:
            with torch.inference_mode(), torch.cuda.stream(self._stream) if self._stream else contextlib.nullcontext():
                if self._timers is not None:
                    self._timers[0].record()
                parts = [j.input[:j.asked] for j in jobs if j.input is not None]
                outputs = self.backend(parts[0] if len(parts) == 1 else torch.cat(parts))
                start = 0
                for job in jobs:
                    for mine, out in zip(job.outputs, outputs):
                        mine[:job.asked].copy_(out[start:start + job.asked])
                    start += job.asked
                if self._timers is not None:
                    self._timers[1].record()
            if self._stream is not None:
                self._stream.synchronize()
            answer: tuple[Any, ...] = ("done",)
            self.forwards += 1
            self.frames += start
            busy = time.perf_counter() - started
            self.busy_s += busy
            self.device_s += self._timers[0].elapsed_time(self._timers[1]) / 1000 if self._timers else busy
        except Exception as exc:  # noqa: BLE001 (the forward failed: every worker in it hears why, the server goes on)
            answer = ("error", f"the forward failed: {type(exc).__name__}: {exc}")
        for job in jobs:
            job.asked = 0
            self._send(job, answer)

    # clients -----------------------------------------------------------------------------------------------
    def _send(self, client: _Client, message: tuple[Any, ...]) -> None:
        try:
            client.conn.send(message)
        except OSError:
            self._drop(client)

    def _drop(self, client: _Client) -> None:
        if client in self._clients:
            self._clients.remove(client)
        self._release(client)
        client.conn.close()

    def _release(self, client: _Client) -> None:
        client.input, client.outputs, client.asked = None, [], 0
        for path in client.files:
            path.unlink(missing_ok=True)
        client.files.clear()


def say(message: dict[str, Any]) -> None:
    """One JSON line on stdout; nothing once nobody reads it (the app died: its workers are still served)."""
    try:
        print(json.dumps(message), flush=True)
    except (BrokenPipeError, ValueError):
        discard_output(sys.stdout)


def _free_bytes(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


def main(argv: list[str] | None = None) -> int:
    from inferstream.backends.loader import load_backend
    from inferstream.errors import InferstreamError

    ap = argparse.ArgumentParser(prog="python -m inferstream.model_server", description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="the socket path workers connect to (model=ipc://PATH)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--graph", default="auto")
    ap.add_argument("--trust-checkpoint", action="store_true")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--capture", choices=("powers-of-two", "every-sum"), default="powers-of-two",
                    help="on a GPU, the batch sizes to capture CUDA graphs for: powers of two up to max-batch (a "
                    "forward runs on the cheapest cover by them), or also every sum of whole requests (a longer "
                    "start)")
    ap.add_argument("--mps-priority", choices=("normal", "below-normal"), default="normal",
                    help="the server's scheduling priority as a CUDA MPS client: below-normal lets the workers' own "
                    "kernels (letterbox, decoding) run ahead of its forwards")
    ap.add_argument("--die-with-parent", action="store_true", help="when the process that started it dies, end "
                    "once its workers are gone (the app's own server)")
    args = ap.parse_args(argv)
    if args.die_with_parent:  # the workers finish their streams when the app dies: serve them until they are gone
        die_with_parent(signal.SIGUSR1)
    # read when CUDA starts, which loading the model does; set either way: the app's workers may run below normal
    os.environ["CUDA_MPS_CLIENT_PRIORITY"] = "1" if args.mps_priority == "below-normal" else "0"
    try:
        backend = load_backend(args.model, device=args.device, precision=args.precision, backend=args.backend,
                               trust_checkpoint=args.trust_checkpoint, graph=args.graph)
    except InferstreamError as exc:
        print(f"model server: cannot load {args.model}: {exc}", file=sys.stderr)
        return 2
    server = ModelServer(backend, max(1, args.max_batch), max(0.0, args.delay_ms) / 1000,
                         every_sum=args.capture == "every-sum")
    Path(args.listen).unlink(missing_ok=True)
    listener = Listener(args.listen, family="AF_UNIX")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop())
    signal.signal(signal.SIGUSR1, lambda *_: server.drain())
    say({"ready": args.listen, "device": str(backend.device)})
    server.serve(listener)
    say({**server.counts(), "workers": server.served})
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
