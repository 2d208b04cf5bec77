"""A model held by a model server on this machine (``inferstream.model_server``): ``model=ipc:///path/model.sock``.

Worker processes that each hold a copy of the model run batches of their own streams only, so on a GPU the
batches stay as small as a worker's share; a model server takes the batches of every worker and runs them as one
forward. Pixels never leave the device: at registration the server allocates this client's input and output
tensors and shares them (CUDA IPC on a GPU, a shared file in ``/dev/shm`` on the CPU). A call copies the batch
into the input on the device, waits for that copy, sends ``("run", n)`` over the socket and waits for
``("done",)``: by then the server has written the outputs and waited for its own stream. The outputs returned
are views of the shared output tensors, valid until the next call, which the batch group's run lock orders
after the decoder that reads them.

Never a hang: every answer has a deadline, and a server that died or stopped is an InferenceServerError
naming the socket, at once or, with ``?reconnect=S``, once it has not come back at the socket within S seconds
(a server that does come back gets the lost batch again).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

from inferstream.backends.base import ModelInfo
from inferstream.errors import BackendInitError, InferenceServerError

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch import Tensor

T = TypeVar("T")

RECONNECT_S: Final = 0.0  # by default a server that went away is an error at once (the app asks for a wait)
# The server answers in turn, and a registration of a new input size (this worker's or another's, queued first)
# captures its CUDA graphs, with TorchScript's shape profiling: far longer than a forward, and longer still while
# many workers start on one GPU (BENCHMARKS.md, *Model server on the H200*). So every answer is given that long; a
# server that died is noticed at once anyway (its socket closes).
ANSWER_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True, slots=True)
class SharedFile:
    """A CPU tensor both processes map from one file (``torch.from_file(shared=True)``)."""

    path: str
    shape: tuple[int, ...]
    dtype: str

    def open(self) -> Tensor:
        import torch

        return torch.from_file(self.path, shared=True, size=math.prod(self.shape),
                               dtype=getattr(torch, self.dtype)).view(self.shape)


def parse_spec(spec: str) -> tuple[str, float]:
    """``ipc:///path/model.sock[?reconnect=S]`` -> (socket path, seconds to wait for a server that went away).

    Raises:
        BackendInitError: not an absolute socket path, or a bad option.
    """
    parts = urlsplit(spec)
    options = parse_qs(parts.query)
    if not parts.path or not Path(parts.path).is_absolute() or parts.netloc:
        raise BackendInitError(f"{spec!r}: a model server is named by its socket, ipc:///absolute/path.sock")
    unknown = set(options) - {"reconnect"}
    if unknown:
        raise BackendInitError(f"{spec!r}: unknown option(s) {sorted(unknown)}; the one option is reconnect=SECONDS")
    try:
        reconnect = float(options.get("reconnect", [RECONNECT_S])[-1])
    except ValueError:
        reconnect = -1.0
    if not 0 <= reconnect <= 3600:
        raise BackendInitError(f"{spec!r}: reconnect is seconds, 0 to 3600")
    return parts.path, reconnect


class ServerLostError(InferenceServerError):
    """The connection to the model server broke: it stopped or died."""


class ServedBackend:
    """The Backend protocol over a model server's socket (see the module docstring).

    A server that goes away (stopped, killed, crashed) is waited for ``reconnect`` seconds: a server started again
    at the same socket (the app restarts it) gets this client's registration again and the batch that was lost, so
    a restart costs a pause, not frames. Past that wait the call fails with the reason.
    """

    def __init__(self, spec: str, device: torch.device | None = None) -> None:
        import torch

        self.address, self._reconnect_s = parse_spec(spec)
        try:
            self._conn: Connection = Client(self.address, family="AF_UNIX")
        except OSError as exc:
            raise BackendInitError(f"no model server at {self.address}: {exc.strerror or exc}") from exc
        info, served_on, dtype = self._ask(("hello", os.getpid()))
        self.info: ModelInfo = info
        self.device = torch.device(served_on)
        self.dtype: torch.dtype = getattr(torch, dtype)
        if device is not None and device.type != self.device.type:
            self.close()
            raise BackendInitError(f"the model server at {self.address} runs the model on {served_on}, "
                                   f"not on {device}: set the same device on both")
        self._input: Tensor | None = None  # before the first call or warmup: no tensors yet
        self._outputs: list[Tensor] = []

    def _ask(self, message: tuple[Any, ...]) -> list[Any]:
        """Send ``message``; the answer's payload (an ``("error", why)`` answer raises)."""
        try:
            self._conn.send(message)
            if not self._conn.poll(ANSWER_TIMEOUT_S):
                raise InferenceServerError(f"the model server at {self.address} gave no answer in "
                                           f"{ANSWER_TIMEOUT_S:g} s")
            answer: tuple[Any, ...] = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise ServerLostError(f"the model server at {self.address} closed the connection: it stopped or died "
                                  "(its own error is in the run's log)") from exc
        kind, *payload = answer
        if kind == "error":
            raise InferenceServerError(f"the model server at {self.address}: {payload[0]}")
        return payload

    def _register(self, capacity: int, height: int, width: int) -> None:
        """Ask for input and output tensors for ``capacity`` frames of ``height`` x ``width``."""
        shared_in, shared_out = self._ask(("register", capacity, height, width))
        self._input = _opened(shared_in)
        self._outputs = [_opened(t) for t in shared_out]

    def _come_back(self, lost: ServerLostError) -> None:
        """Connect to the server started again at the socket and register as before; ``lost`` past the wait."""
        deadline = time.monotonic() + self._reconnect_s
        self._conn.close()
        while True:
            try:
                self._conn = Client(self.address, family="AF_UNIX")
                info, served_on, _ = self._ask(("hello", os.getpid()))
                break
            except (OSError, ServerLostError):  # not listening yet, or gone again while it started
                if time.monotonic() >= deadline:
                    raise lost from None
                time.sleep(0.2)
        if info != self.info or served_on != str(self.device):
            raise InferenceServerError(f"the model server at {self.address} came back with another model or "
                                       "device")
        if self._input is not None:
            self._register(self._input.shape[0], *self._input.shape[2:])

    def __call__(self, batch: Tensor) -> list[Tensor]:
        return self._with_server(lambda: self._run(batch))  # a lost batch is run again: the new server has not seen it

    def _with_server(self, ask: Callable[[], T]) -> T:
        """``ask()``; once more on the server started again (``_come_back``) if the first one was lost."""
        try:
            return ask()
        except ServerLostError as lost:
            self._come_back(lost)
            return ask()

    def _run(self, batch: Tensor) -> list[Tensor]:
        import torch

        n, _, height, width = batch.shape
        slot = self._input
        if slot is None or n > slot.shape[0] or tuple(slot.shape[2:]) != (height, width):
            self._register(max(n, slot.shape[0] if slot is not None else 0), height, width)
            slot = self._input
        assert slot is not None
        slot[:n].copy_(batch)
        if slot.is_cuda:  # the server reads the input on its own stream: the copy must be done first
            torch.cuda.current_stream(slot.device).synchronize()
        self._ask(("run", n))
        return [out[:n] for out in self._outputs]

    def warmup(self, batch_size: int, input_size: tuple[int, int]) -> None:
        """Register for the group's batch size: the server warms its model (and graphs) up for that size."""
        self._with_server(lambda: self._register(batch_size, *input_size))

    def close(self) -> None:
        self._input, self._outputs = None, []
        self._conn.close()


def _opened(shared: Any) -> Tensor:
    """A tensor the server shared: CUDA tensors arrive opened (torch's IPC reduction), files are mapped here."""
    return shared.open() if isinstance(shared, SharedFile) else shared


def load(spec: str, device: torch.device | None = None, **_ignored: Any) -> ServedBackend:
    """``load_backend``'s entry: precision and graphs are the server's."""
    return ServedBackend(spec, device)
