"""One process that holds a model for every worker on its device: batches of all workers in one forward.

    python -m inferstream.model_server --listen /run/x/model.sock --model yolo11s.pt --device cuda [--max-batch 32]

Workers load ``model=ipc:///run/x/model.sock`` (``backends.served``): each registers its input size and batch
size, gets input and output tensors shared with it (CUDA IPC on a GPU, a file in ``/dev/shm`` on the CPU), and
sends ``("run", n)`` once its batch is in its input. The server's main thread takes every request that is
waiting, up to ``max-batch`` frames, as one forward (on a GPU: on the cheapest cover of its frames by the captured
CUDA graphs, ``backends.cuda_graphs``) whose last step copies each worker's outputs into that worker's tensors,
and answers ``("done",)`` once the forward has ended. It never waits for a batch to fill (``--delay-ms`` lets it
wait that long for workers that have not asked yet): with the GPU busy, requests pile up while a forward runs,
and the next forward takes them all. Up to ``DEPTH`` forwards are under way at once: on a GPU the next one is
launched on the server's CUDA stream behind the running one as soon as its requests fill a forward, so the GPU
goes from one forward to the next without waiting for this process to read, answer and launch; the model's
thread (``model_thread``) waits for each forward's end (on the CPU it runs the forward: its one OpenMP pool).
A worker that registered its decoder's family and sends its thresholds with a request (``backends.served``:
``submit_decoded``) gets its frames' rows instead of outputs: a decoding thread (one torch thread) decodes every
such request of a forward at once once the forward has ended, with those of every other forward that ended while it
was busy, on a CUDA stream of its own, while the model's thread goes on with the next forward (``decoding``).

The socket's folder is the access control (the app makes it private): whoever can connect can send pickles. What
the process prints, and how it stops: ``__main__``.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection, Listener, wait
from typing import TYPE_CHECKING, Any, Final

from inferstream.model_server.decoding import Decoders, decode_together, groups_of
from inferstream.model_server.forwards import Client, Forward, answer
from inferstream.model_server.shared import SharedTensors
from inferstream.model_server.warmup import Warmer
from inferstream.model_thread import ModelThread
from inferstream.models.base import DecodeParams
from inferstream.native.process import discard_output

STATS_EVERY_S: Final = 1.0
DRAIN_S: Final = 60.0
DEPTH: Final = 2  # forwards under way at once: the running one and one queued behind it on the device

if TYPE_CHECKING:
    from collections.abc import Callable
    from concurrent.futures import Future

    import torch

    from inferstream.backends.base import Backend


class ModelServer:
    """The serving loop (see the module docstring); ``serve`` runs it until ``stop``."""

    def __init__(self, backend: Backend, max_batch: int = 32, delay_s: float = 0.0, every_sum: bool = False,
                 thread: ModelThread | None = None) -> None:
        """``every_sum``: on a GPU, capture a graph for every sum of whole requests up to ``max_batch``
        (``--capture every-sum``), not only the powers of two. ``thread``: the model's thread, where a CPU model
        was loaded (``main``); one of its own otherwise."""
        import torch
        import torch.multiprocessing  # registers torch's CUDA IPC reductions with the pickler

        self.backend, self.max_batch, self.delay_s, self.every_sum = backend, max_batch, delay_s, every_sum
        self._stream = torch.cuda.Stream(backend.device) if backend.device.type == "cuda" else None
        # decoding waits for a forward's end on a stream of its own, beside the next forward
        self._decode_stream = torch.cuda.Stream(backend.device) if backend.device.type == "cuda" else None
        self._decoders = Decoders(backend.info)
        self._thread = thread or ModelThread("model-server-model")
        # decodes a forward's rows while the model's thread goes on to the next forward (on the CPU it runs it)
        self._decoding = ModelThread("model-server-decode")
        self._decoding.one_torch_thread()
        self._running: list[Forward] = []  # launched and not answered yet, oldest first (at most DEPTH on the device)
        self._ended: deque[Forward] = deque()  # ended, to answer: the model's thread hands them to the main one
        self._to_decode: list[Forward] = []  # ended, their rows not decoded yet: the next decoding call takes them all
        self._to_decode_lock = threading.Lock()
        self._last_end = 0.0  # when the last forward ended: busy time counts a forward queued behind it from there
        self._clients: list[Client] = []
        self._accepted: list[Connection] = []
        self._accept_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False
        self._drain_until = 0.0  # once the parent died: when to end even with workers left
        self._requests = itertools.count()
        self._warmer = Warmer(backend, max_batch, every_sum)
        self._shared = SharedTensors(backend.device)
        self.forwards = self.frames = 0
        self.queued = 0  # forwards launched while another was under way: the GPU did not wait for this process
        self._owners: set[tuple[int, int]] = set()  # every backend served, for the count at exit
        self.busy_s = 0.0  # in forwards, from each launch (or the end of the one it queued behind) to its end: its
        # rate is how busy the model is
        self.device_s = 0.0  # the same forwards timed on the device (on the CPU: busy_s)
        self.requests = 0  # requests answered after a forward, and their time here, from arrival to answer:
        self.request_s = 0.0  # beside a worker's own round trip, where a request's time goes
        self.decodes = 0  # decoding calls (each takes every forward that ended while the last one ran), and their
        self.decode_s = 0.0  # time on the decoding thread: its rate is how busy that thread is

    # the loop ----------------------------------------------------------------------------------------------
    def serve(self, listener: Listener) -> None:
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name="model-server-accept").start()
        said = time.monotonic()
        try:
            while not self._stopping:
                self._read(wait([c.conn for c in self._clients] + [self._wake_r], timeout=STATS_EVERY_S))
                self._answer_ended()
                self._launch_ready()
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
        return {"forwards": self.forwards, "frames": self.frames, "busy_s": self.busy_s, "device_s": self.device_s,
                "queued": self.queued, "requests": self.requests, "request_s": self.request_s,
                "decodes": self.decodes, "decode_s": self.decode_s}

    def close(self) -> None:
        """Let every worker go, remove the shared files and end the model's thread."""
        self._settle()
        for client in list(self._clients):
            self._drop(client)
        self._shared.close()
        self._decoding.close(wait=True)
        self._thread.close(wait=True)

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
                self._clients += [Client(conn) for conn in self._accepted]
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
    def _handle(self, client: Client, message: tuple[Any, ...]) -> None:
        kind, *args = message
        try:
            if kind == "hello":
                client.owner = (int(args[0]), int(args[1]))
                self._owners.add(client.owner)
                dtype = str(self.backend.dtype).removeprefix("torch.")
                self._send(client, ("info", self.backend.info, str(self.backend.device), dtype))
            elif kind == "register" and (len(args) == 3 or isinstance(args[3], str | None)):
                self._settle()  # warming up replays graphs that share memory with the forwards: none may be under way
                self._send(client, ("slots", *self._register(client, *args)))
            elif kind == "run" and client.input is not None and not client.asked and 0 < args[0] <= client.shape[0] \
                    and (len(args) == 1 or client.decoder is not None and isinstance(args[1], DecodeParams)):
                client.asked, client.asked_at = int(args[0]), next(self._requests)
                client.asked_time = time.perf_counter()
                client.params = args[1] if len(args) > 1 else None
            else:
                why = (f"unexpected request {kind!r} (register before run, at most the registered batch, one run "
                       "at a time, thresholds only with a family registered)")
                self._send(client, ("error", why))
        except Exception as exc:  # noqa: BLE001 (a bad size, a model that fails on it, no memory: that worker's error)
            self._send(client, ("error", f"{type(exc).__name__}: {exc}"))

    def _register(self, client: Client, capacity: int, height: int, width: int,
                  family: str | None = None) -> tuple[Any, list[Any]]:
        """Allocate (and share) ``client``'s tensors; the first worker of a size warms the model up for it. With a
        ``family`` its requests may ask for their rows decoded here (``decoding``)."""
        import torch

        self._release(client)
        if note := self._on_model(lambda: self._warmer.warm_up(capacity, height, width)):
            say({"note": note})
        probed = self._on_model(lambda: self._probe(height, width))
        if any(not shape or shape[0] != 1 for shape, _ in probed):
            raise ValueError(f"outputs {[s for s, _ in probed]} do not all have the batch first: this model "
                             "cannot be served")
        client.decoder = None if family is None else self._decoders.get(family, [s for s, _ in probed], height, width)
        client.input, shared_in = self._shared.make(client.files, (capacity, 3, height, width), self.backend.dtype)
        made = [self._shared.make(client.files, (capacity, *shape[1:]), dtype) for shape, dtype in probed]
        client.outputs = [tensor for tensor, _ in made]
        client.shape = (capacity, height, width)
        if self.backend.device.type == "cuda":
            torch.cuda.synchronize(self.backend.device)
        return shared_in, [shared for _, shared in made]

    def _probe(self, height: int, width: int) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """The shape and dtype of each output for one frame of ``height`` x ``width``."""
        import torch

        probe = torch.zeros((1, 3, height, width), dtype=self.backend.dtype, device=self.backend.device)
        with torch.inference_mode():
            return [(tuple(o.shape), o.dtype) for o in self.backend(probe)]

    def _on_model(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` where the model computes: on the CPU its thread (one OpenMP pool), on a GPU here (kernels are
        launched from this thread; its forwards are settled first)."""
        return fn() if self._stream is not None else self._thread.run(fn)

    # forwards of the waiting requests --------------------------------------------------------------------------
    def _waiting(self) -> list[Client]:
        """The next forward's requests: the oldest first, of the oldest request's input size, up to ``max_batch``
        frames (one request larger than that runs alone)."""
        jobs: list[Client] = []
        for client in sorted((c for c in self._clients if c.asked and not c.in_forward), key=lambda c: c.asked_at):
            same = not jobs or client.shape[1:] == jobs[0].shape[1:]
            if same and (not jobs or sum(j.asked for j in jobs) + client.asked <= self.max_batch):
                jobs.append(client)
        return jobs

    def _launch_ready(self) -> None:
        """Launch forwards while fewer than ``DEPTH`` are under way. With none under way the requests waiting now
        go (after ``delay_s`` for idle workers); behind a running forward only a full one is launched: the requests
        that pile up while a forward runs would otherwise be split over smaller forwards."""
        while len(running := [f for f in self._running if f.on_device]) < DEPTH and (jobs := self._waiting()):
            if running and sum(j.asked for j in jobs) < self.max_batch:
                return
            if not running:
                self._linger()
                if not (jobs := self._waiting()):  # the only worker asking went meanwhile
                    return
            self._launch(jobs)

    def _launch(self, jobs: list[Client]) -> None:
        """Start one forward of ``jobs``: on a GPU its kernels on the server's stream, the model's thread waiting
        for its end; on the CPU the whole forward on the model's thread. Its end is answered by ``_answer_ended``."""
        import torch

        inputs = [job.input[:job.asked] for job in jobs if job.input is not None]
        forward = Forward(jobs, inputs, [job.outputs for job in jobs], time.perf_counter(), groups=groups_of(jobs))
        for job in jobs:
            job.in_forward = True
        self.queued += any(f.on_device for f in self._running)
        self._running.append(forward)
        try:
            if self._stream is None:
                future: Future[Any] = self._thread.submit(lambda: self._forward(forward))
            else:
                # its start and end on the device: how long the GPU itself took, apart from the host around it
                timers = forward.timers = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                with torch.cuda.stream(self._stream):
                    self._forward(forward)
                future = self._thread.submit(timers[1].synchronize)
        except Exception as exc:  # noqa: BLE001 (the forward failed: every worker in it hears why, the server goes on)
            self._end(forward, exc)
            return
        future.add_done_callback(lambda done: self._ended_forward(forward, done.exception()))

    def _forward(self, forward: Forward) -> None:
        """Run the model on the requests' rows; copy each worker's rows of the outputs into its tensors, or keep
        them for decoding here (``_decode_waiting``)."""
        import torch

        with torch.inference_mode():
            if forward.timers is not None:
                forward.timers[0].record()
            inputs = forward.inputs
            outputs = self.backend(inputs[0] if len(inputs) == 1 else torch.cat(inputs))
            start = 0
            for job, rows, mine in zip(forward.jobs, inputs, forward.outputs):
                n = rows.shape[0]
                if job.params is None:
                    for dst, out in zip(mine, outputs):
                        dst[:n].copy_(out[start:start + n])
                start += n
            for group in forward.groups:  # a CUDA graph's outputs are the next forward's: copied
                group.take(outputs, copy=forward.timers is not None)
            if forward.timers is not None:
                forward.timers[1].record()

    def _ended_forward(self, forward: Forward, exc: BaseException | None) -> None:
        """``forward`` has ended (on the model's thread): its rows to decode go to the decoding thread, in order,
        and it is answered once they are decoded; the model's thread goes on with the next forward."""
        forward.ended, forward.on_device = time.perf_counter(), False
        if exc is not None or not forward.groups:
            self._end(forward, exc)
            return
        os.write(self._wake_w, b"e")  # the device has room for the next forward while this one's rows decode
        with self._to_decode_lock:
            self._to_decode.append(forward)
            if len(self._to_decode) > 1:  # a decoding call is queued already: it takes this one too
                return
        self._decoding.submit(self._decode_waiting)

    def _decode_waiting(self) -> None:
        """Decode the rows of every forward that has ended since the last call, at once (on the decoding thread; on a
        GPU on the decoding stream), and hand those forwards on to be answered, in the order they ended."""
        with self._to_decode_lock:
            forwards, self._to_decode = self._to_decode, []
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            answers = decode_together([group for forward in forwards for group in forward.groups],
                                      self._decode_stream)
            for forward in forwards:
                forward.answers.update({job: answers[job] for job in forward.jobs if job in answers})
        except Exception as exc:  # noqa: BLE001 (answered as each forward's error; the server goes on)
            error = exc
        self.decodes += 1
        self.decode_s += time.perf_counter() - started
        for forward in forwards:
            self._end(forward, error)

    def _end(self, forward: Forward, exc: BaseException | None) -> None:
        """``forward`` is done (on the model's or the decoding thread): hand it to the main thread, which answers its
        workers."""
        forward.ended = forward.ended or time.perf_counter()  # a forward that failed to launch
        if exc is not None:
            forward.error = f"the forward failed: {type(exc).__name__}: {exc}"
        self._ended.append(forward)
        forward.settled.set()
        os.write(self._wake_w, b"f")

    def _answer_ended(self) -> None:
        """Count the forwards that have ended and answer their workers (``done``, or the forward's error)."""
        while self._ended:
            forward = self._ended.popleft()
            self._running.remove(forward)
            if forward.error is None:
                self.forwards += 1
                self.frames += forward.frames
                busy = forward.ended - max(forward.launched, self._last_end)  # queued behind another: from its end
                self.busy_s += busy
                timers = forward.timers
                self.device_s += timers[0].elapsed_time(timers[1]) / 1000 if timers is not None else busy
            self._last_end = max(self._last_end, forward.ended)
            for job in forward.jobs:
                job.asked, job.in_forward = 0, False
                if job in self._clients:
                    self._send(job, answer(forward, job))
                    if forward.error is None:
                        self.requests += 1
                        self.request_s += time.perf_counter() - job.asked_time

    def _settle(self) -> None:
        """Wait for the forwards under way to end, and answer them."""
        for forward in list(self._running):
            forward.settled.wait()
        self._answer_ended()

    # clients -----------------------------------------------------------------------------------------------
    def _send(self, client: Client, message: tuple[Any, ...]) -> None:
        try:
            client.conn.send(message)
        except OSError:
            self._drop(client)

    def _drop(self, client: Client) -> None:
        if client in self._clients:
            self._clients.remove(client)
        self._release(client)
        client.conn.close()

    def _release(self, client: Client) -> None:
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

