"""A model held by a model server on this machine (``inferstream.model_server``): ``model=ipc:///path/model.sock``.

Worker processes that each hold a copy of the model run batches of their own streams only, so on a GPU the
batches stay as small as a worker's share; a model server takes the batches of every worker and runs them as one
forward. Pixels never leave the device: at registration the server allocates this client's input and output
tensors and shares them (CUDA IPC on a GPU, a shared file in ``/dev/shm`` on the CPU). ``submit`` copies the
batch into the input on the device, waits for that copy and sends ``("run", n)`` over the socket; collecting
waits for ``("done",)``: by then the server has written the outputs and waited for its own stream. The outputs
are views of the shared output tensors, valid until that lane's next batch, which the batch group orders after
the decoder that reads them (``batching.BatchGroup._run``). A backend told its decoder's family
(``decode_at_server``) may instead send ``("run", n, thresholds)`` (``submit_decoded``): the server decodes the
rows of every such request of a forward at once and answers each with its frames' rows (``model_server.decoding``).

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

    import numpy as np
    import numpy.typing as npt
    import torch
    from torch import Tensor

    from inferstream.detections import Detections

T = TypeVar("T")

RECONNECT_S: Final = 0.0  # by default a server that went away is an error at once (the app asks for a wait)
# The server answers in turn, and a registration of a new input size (this worker's or another's, queued first)
# captures its CUDA graphs, with TorchScript's shape profiling: far longer than a forward, and longer still while
# many workers start on one GPU (BENCHMARKS.md, *Model server on the H200*). So every answer is given that long; a
# server that died is noticed at once anyway (its socket closes).
ANSWER_TIMEOUT_S: Final = 300.0
# batches of one backend at the server at once, each in its own lane: a batch group's completion thread collects
# them in order while the threads that filled the next ones hand them over (pyinfer's in-flight up to 3 fills them)
LANES: Final = 3


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


@dataclass(frozen=True, slots=True)
class Rows:
    """One request's rows decoded by the server (``model_server.decoding``), as they cross the socket: numpy
    arrays pickle as plain bytes, where torch's own reduction would pass CPU tensors as shared-memory files. Boxes
    in model-input pixels, as a flat decoder gives them.

    Attributes:
        image_ids: int64 [N], each row's frame in the request (grouped by frame, ascending).
        boxes_xyxy: float32 [N, 4]. scores: float32 [N]. labels: int64 [N]. angles_rad: float32 [N] or None.
        keypoints: float32 [N, K, 3] or None.
    """

    image_ids: npt.NDArray[np.int64]
    boxes_xyxy: npt.NDArray[np.float32]
    scores: npt.NDArray[np.float32]
    labels: npt.NDArray[np.int64]
    angles_rad: npt.NDArray[np.float32] | None = None
    keypoints: npt.NDArray[np.float32] | None = None

    def detections(self) -> tuple[Detections, Tensor]:
        """``(rows, image_ids)`` as CPU tensors (views of these arrays), checked: they came from another process."""
        import torch

        from inferstream.detections import Detections

        def tensor(a: Any) -> Tensor | None:
            return None if a is None else torch.from_numpy(a)

        dets = Detections(boxes_xyxy=torch.from_numpy(self.boxes_xyxy), scores=torch.from_numpy(self.scores),
                          labels=torch.from_numpy(self.labels), angles_rad=tensor(self.angles_rad),
                          keypoints=tensor(self.keypoints))
        return dets, torch.from_numpy(self.image_ids)


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


class _Lane:
    """One connection to the server, with its own input and output tensors: one request in flight at a time."""

    def __init__(self, address: str, owner: int, reconnect_s: float, beside: _Lane | None = None) -> None:
        """The backend's first lane, or another ``beside`` it, opened while the backend runs: that one waits for a
        server that is starting again as a lost lane does (``come_back``)."""
        self.address, self._owner, self._reconnect_s = address, owner, reconnect_s
        self.family: str | None = None  # registered with the server's decoder of this family (``decode_at_server``)
        self.input: Tensor | None = None  # before the first call or warmup: no tensors yet
        self.outputs: list[Tensor] = []
        self.busy = False  # a request sent whose answer is not read yet
        self._conn: Connection
        self.hello: tuple[ModelInfo, str, str]
        if beside is not None:
            self.hello = beside.hello
            self._connect(ServerLostError(f"the model server at {address} took no further connection: it "
                                          "stopped or died (its own error is in the run's log)"))
            return
        try:
            self._conn = Client(address, family="AF_UNIX")
        except OSError as exc:
            raise BackendInitError(f"no model server at {address}: {exc.strerror or exc}") from exc
        info, served_on, dtype = self._ask(("hello", os.getpid(), owner))
        self.hello = (info, served_on, dtype)

    def _ask(self, message: tuple[Any, ...]) -> list[Any]:
        """Send ``message``; the answer's payload (an ``("error", why)`` answer raises)."""
        self._send(message)
        return self._answer()

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._conn.send(message)
        except OSError as exc:
            raise self._lost() from exc

    def _answer(self) -> list[Any]:
        try:
            if not self._conn.poll(ANSWER_TIMEOUT_S):
                raise InferenceServerError(f"the model server at {self.address} gave no answer in "
                                           f"{ANSWER_TIMEOUT_S:g} s")
            answer: tuple[Any, ...] = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise self._lost() from exc
        kind, *payload = answer
        if kind == "error":
            raise InferenceServerError(f"the model server at {self.address}: {payload[0]}")
        return payload

    def _lost(self) -> ServerLostError:
        return ServerLostError(f"the model server at {self.address} closed the connection: it stopped or died "
                               "(its own error is in the run's log)")

    def register(self, capacity: int, height: int, width: int) -> None:
        """Ask for input and output tensors for ``capacity`` frames of ``height`` x ``width`` (and, with a
        ``family``, for the server's decoder of it at that size)."""
        shared_in, shared_out = self._ask(("register", capacity, height, width, self.family))
        self.input = _opened(shared_in)
        self.outputs = [_opened(t) for t in shared_out]

    def send(self, batch: Tensor, params: object | None = None) -> None:
        """Copy ``batch`` into the input (registering a larger or other size first) and ask for its forward (its
        rows decoded with ``params``, when given)."""
        import torch

        n, _, height, width = batch.shape
        slot = self.input
        if slot is None or n > slot.shape[0] or tuple(slot.shape[2:]) != (height, width):
            self.register(max(n, slot.shape[0] if slot is not None else 0), height, width)
            slot = self.input
        assert slot is not None
        slot[:n].copy_(batch)
        if slot.is_cuda:  # the server reads the input on its own stream: the copy must be done first
            torch.cuda.current_stream(slot.device).synchronize()
        self._send(("run", n) if params is None else ("run", n, params))
        self.busy = True

    def run(self, batch: Tensor) -> list[Tensor]:
        """``send`` then ``collect``."""
        self.send(batch)
        return self.collect(batch.shape[0])

    def collect(self, n: int) -> list[Tensor]:
        """The outputs of the request sent: views of this lane's output tensors, valid until its next request."""
        self._answer()
        self.busy = False
        return [out[:n] for out in self.outputs]

    def collect_rows(self) -> tuple[Detections, Tensor]:
        """The decoded rows of the request sent (``send`` with thresholds) and each one's frame, on the CPU."""
        payload = self._answer()
        self.busy = False
        if len(payload) != 1 or not isinstance(payload[0], Rows):
            raise InferenceServerError(f"the model server at {self.address} sent no decoded rows: {payload!r:.80}")
        return payload[0].detections()

    def come_back(self, lost: ServerLostError) -> None:
        """Connect to the server started again at the socket and register as before; ``lost`` past the wait."""
        self._conn.close()
        self.busy = False
        self._connect(lost)
        if self.input is not None:
            self.register(self.input.shape[0], *self.input.shape[2:])

    def _connect(self, lost: ServerLostError) -> None:
        """Connect and say hello, waiting up to ``reconnect`` seconds for a server started again at the socket;
        ``lost`` past the wait. The server must hold the model this lane's backend was given."""
        deadline = time.monotonic() + self._reconnect_s
        while True:
            try:
                self._conn = Client(self.address, family="AF_UNIX")
                hello = tuple(self._ask(("hello", os.getpid(), self._owner)))
                break
            except (OSError, ServerLostError):  # not listening yet, or gone again while it started
                if time.monotonic() >= deadline:
                    raise lost from None
                time.sleep(0.2)
        if hello[:2] != self.hello[:2]:
            raise InferenceServerError(f"the model server at {self.address} came back with another model or device")

    def close(self) -> None:
        self.input, self.outputs = None, []
        self._conn.close()


class ServedBackend:
    """The Backend protocol over a model server's socket (see the module docstring).

    ``submit`` sends a batch and returns at once, so that a batch group prepares its next batch while the server
    runs this one: batches take the lanes in turn (a lane: a connection with its own tensors; each one past the
    first is opened at the first batch that needs it). A server that goes away (stopped, killed, crashed) is waited
    for ``reconnect`` seconds: a server started again at the same socket (the app restarts it) gets this client's
    registration again and the batch that was lost, so a restart costs a pause, not frames. Past that wait the call
    fails with the reason.
    """

    lanes: Final = LANES  # how many batches may be submitted and not yet collected (batching.completion)

    def __init__(self, spec: str, device: torch.device | None = None) -> None:
        import torch

        self.address, self._reconnect_s = parse_spec(spec)
        first = _Lane(self.address, id(self), self._reconnect_s)
        info, served_on, dtype = first.hello
        self.info: ModelInfo = info
        self.device = torch.device(served_on)
        self.dtype: torch.dtype = getattr(torch, dtype)
        if device is not None and device.type != self.device.type:
            first.close()
            raise BackendInitError(f"the model server at {self.address} runs the model on {served_on}, "
                                   f"not on {device}: set the same device on both")
        self._lanes = [first]
        self._sent = 0  # batches submitted: the next one's lane is this modulo LANES

    def __call__(self, batch: Tensor) -> list[Tensor]:
        """``batch``'s outputs, on the first lane (views valid until its next batch)."""
        return self._with_server(self._lanes[0], lambda: self._lanes[0].run(batch))

    def decode_at_server(self, family: str | None) -> None:
        """From the next registration on, have the server build ``family``'s decoder for this backend (None: no
        decoder), so that ``submit_decoded`` can ask for decoded rows (``model_server.decoding``: the family's
        decoder must be a flat one without masks). Every lane registers again at its next batch; its raw outputs
        stay available."""
        for lane in self._lanes:
            lane.family = family
            lane.input = None  # registers again, with the family, before its next batch

    def submit_decoded(self, batch: Tensor, params: object) -> Callable[[], tuple[Detections, Tensor]]:
        """``submit``, but the server decodes the batch's rows with ``params``, the decoder's thresholds
        (``models.base.DecodeParams``: carried, not read here), after ``decode_at_server``: the call returned waits
        for them and gives ``(rows, image_ids)`` on the CPU, boxes in model-input pixels."""
        if self._lanes[0].family is None:
            raise InferenceServerError("submit_decoded before decode_at_server: the server has no decoder for us")
        return self._submit(batch, params, _Lane.collect_rows)

    def submit(self, batch: Tensor) -> Callable[[], list[Tensor]]:
        """Send ``batch`` to the server; returns the call that waits for its outputs (views valid until ``LANES``
        batches later are sent: at most ``LANES`` batches may be sent and not yet collected)."""
        n = batch.shape[0]
        return self._submit(batch, None, lambda lane: lane.collect(n))

    def _submit(self, batch: Tensor, params: object | None, take: Callable[[_Lane], T]) -> Callable[[], T]:
        """Send ``batch`` (with ``params``: to be decoded) on the next lane; the call returned waits for the answer
        (``take``), and a server that went away and came back runs the batch again."""
        lane = self._next_lane()
        self._with_server(lane, lambda: lane.send(batch, params))

        def again() -> T:
            lane.send(batch, params)
            return take(lane)

        def collect() -> T:
            try:
                return take(lane)
            except ServerLostError as lost:  # the new server has not seen the batch: it runs again there
                lane.come_back(lost)
                return self._with_server(lane, again)
        return collect

    def _next_lane(self) -> _Lane:
        """The lanes in turn: a batch's outputs stay untouched until ``LANES`` batches later (a batch group's
        completion thread decodes a batch before its lane is taken again: ``batching.completion``)."""
        index = self._sent % LANES
        if index == len(self._lanes):
            lane = _Lane(self.address, id(self), self._reconnect_s, beside=self._lanes[0])
            lane.family = self._lanes[0].family
            first = self._lanes[0].input
            if first is not None:  # the size the group registered at its warm-up
                self._with_server(lane, lambda: lane.register(first.shape[0], *first.shape[2:]))
            self._lanes.append(lane)
        lane = self._lanes[index]
        if lane.busy:
            raise InferenceServerError(f"more than {LANES} batches sent to the model server at {self.address} "
                                       "before their outputs were collected")
        self._sent += 1
        return lane

    @staticmethod
    def _with_server(lane: _Lane, ask: Callable[[], T]) -> T:
        """``ask()``; once more on the server started again (``come_back``) if the first one was lost."""
        try:
            return ask()
        except ServerLostError as lost:
            lane.come_back(lost)
            return ask()

    def warmup(self, batch_size: int, input_size: tuple[int, int]) -> None:
        """Register for the group's batch size: the server warms its model (and graphs) up for that size."""
        for lane in self._lanes:
            self._with_server(lane, lambda lane=lane: lane.register(batch_size, *input_size))  # type: ignore[misc]

    def close(self) -> None:
        for lane in self._lanes:
            lane.close()


def _opened(shared: Any) -> Tensor:
    """A tensor the server shared: CUDA tensors arrive opened (torch's IPC reduction), files are mapped here."""
    return shared.open() if isinstance(shared, SharedFile) else shared


def load(spec: str, device: torch.device | None = None, **_ignored: Any) -> ServedBackend:
    """``load_backend``'s entry: precision and graphs are the server's."""
    return ServedBackend(spec, device)
