"""What the model server keeps per worker (``Client``) and per forward under way (``Forward``), and what a worker
hears once its forward is done (``answer``). Plain records: the serving loop (``model_server``) moves them."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from torch import Tensor

    from inferstream.backends.served import Rows
    from inferstream.model_server.decoding import Group
    from inferstream.models.base import DecodeParams, FlatDecoder


@dataclass(eq=False)
class Client:
    """One connection: a batch group's lane, with its shared tensors and its request."""

    conn: Connection
    owner: tuple[int, int] = (0, 0)  # (pid, backend): a backend's lanes are one client of the server's counts
    shape: tuple[int, int, int] = (0, 0, 0)  # capacity, height, width once registered
    input: Tensor | None = None
    outputs: list[Tensor] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    asked: int = 0  # frames of the request not answered yet (waiting, or in a forward), 0: none
    asked_at: int = 0  # the request's number: the oldest run first
    asked_time: float = 0.0  # when the request came (perf_counter): its time at the server, until answered
    in_forward: bool = False  # its request is in a forward under way
    decoder: FlatDecoder | None = None  # registered to have its rows decoded here (``decoding``)
    params: DecodeParams | None = None  # the request's thresholds: decode its rows (None: send the raw outputs)


@dataclass(eq=False)
class Forward:
    """One forward under way: its requests, and the tensors it reads and writes, held until it has ended (a worker
    that goes meanwhile must not free memory the device still uses)."""

    jobs: list[Client]
    inputs: list[Tensor]  # each job's rows of its input
    outputs: list[list[Tensor]]  # each job's output tensors
    launched: float  # perf_counter
    timers: tuple[Any, Any] | None = None  # CUDA events around it on the server's stream
    groups: list[Group] = field(default_factory=list)  # the requests whose rows are decoded here
    answers: dict[Client, Rows | str] = field(default_factory=dict)  # their rows, or why decoding failed
    ended: float = 0.0
    on_device: bool = True  # False once the forward itself has ended (its rows may still be decoding)
    error: str | None = None
    settled: threading.Event = field(default_factory=threading.Event)

    @property
    def frames(self) -> int:
        return sum(rows.shape[0] for rows in self.inputs)


def answer(forward: Forward, job: Client) -> tuple[Any, ...]:
    """What ``job`` hears of ``forward``: its rows, ``done`` (its outputs are in its tensors), or why it failed."""
    if forward.error is not None:
        return ("error", forward.error)
    rows = forward.answers.get(job)
    if isinstance(rows, str):
        return ("error", rows)
    return ("done",) if rows is None else ("done", rows)
