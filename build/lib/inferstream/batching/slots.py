"""What a batch group is made of (``batching``): the jobs and trackers it takes from its members, a frame's slot
while it waits for its batch, and the counters of where a batch's time goes."""
from __future__ import annotations

import contextlib
import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from inferstream.batching import Member
    from inferstream.detections import Detections
    from inferstream.inference import ModelStep
    from inferstream.models.base import DecodeParams
    from inferstream.rawframe import RawFrame


class FrameJob(Protocol):
    """One frame's part of a batch; both methods run on the thread that runs the batch."""

    buf: Any  # the frame's buffer (opaque here): what the stream's tracker tracks

    def frame(self) -> AbstractContextManager[RawFrame]:
        """The frame's pixels, valid until the batch (``deliver`` and tracking included) is done."""

    def deliver(self, dets: Detections, model: ModelStep) -> None:
        """Take the frame's detections (the frame is still mapped), e.g. write them as metadata."""


class BatchTracker(Protocol):
    """A stream's tracker registered with its batch group (``runner.tracking.TrackStage``)."""

    def track_together(self, frames: list[tuple[Any, Any]]) -> None:
        """Track ``(tracker, buffer)`` pairs of one batch, on the batch's thread, in one update."""

    def track_seated(self, buf: Any) -> None:
        """Track a frame of this stream that was in no batch (skipped by ``interval``, secondary, NVMM)."""

    def leave(self) -> None:
        """The stream left the group: track its own frames again."""


class Signal:
    """Wakes one waiting thread: a bare lock held while unsignalled. ``threading.Event`` waits and sets through a
    Python-level Condition, and with 32 streaming threads that was ~15 % of the batch path's GIL time (py-spy on
    the GPU host); here both are a single C call."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        """Signal (idempotent until the waiter takes it)."""
        with contextlib.suppress(RuntimeError):  # already signalled
            self._lock.release()

    def wait(self, timeout: float | None) -> None:
        """Block until signalled or ``timeout`` seconds (None: no limit) have passed; takes the signal."""
        self._lock.acquire(timeout=-1 if timeout is None else timeout)


@dataclass(eq=False)
class Pending:
    """A frame handed to the group (``submit``): ``done`` once delivered or failed (``error``)."""

    job: FrameJob
    params: DecodeParams
    member: Member | None
    arrived: float
    wake: Signal = field(default_factory=Signal)  # set: done, or check whether to lead
    done: bool = False  # set before ``wake`` when the frame has been delivered (or failed)
    taken: bool = False  # in a batch (running or about to): its thread only waits for it to be done
    error: BaseException | None = None
    turn: int = 0  # on a batch's first frame: the batch's place in the order batches were taken


# Where a batch's time goes, in order: waiting for its turn at the run lock (the batch before it still infers),
# then ``ModelStep``'s preprocess, model and decode (host clock: on a GPU each stage ends when the host is done with
# it, so a stage that waits for the device holds the wait), then handing out the results and tracking.
STAGES = ("turn-wait", "preprocess", "model", "decode", "deliver")


@dataclass
class BatchStats:
    """Counters readable at runtime (the element exposes them as a read-only property)."""

    batches: int = 0
    frames: int = 0
    wait_s: float = 0.0
    infer_s: float = 0.0
    stage_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))  # summed over batches

    @property
    def mean_fill(self) -> float:
        return self.frames / self.batches if self.batches else 0.0

    def as_dict(self) -> dict[str, float]:
        per_batch = 1e3 / max(self.batches, 1)
        return {"batches": self.batches, "frames": self.frames, "mean-fill": round(self.mean_fill, 3),
                "mean-wait-ms": round(1e3 * self.wait_s / max(self.frames, 1), 3),
                "mean-infer-ms": round(self.infer_s * per_batch, 3),
                **{f"mean-{stage}-ms": round(s * per_batch, 3) for stage, s in self.stage_s.items()}}

    def add(self, frames: int, infer_s: float, stages: dict[str, float]) -> None:
        """One batch of ``frames``: its time and its stages' (call with the group's lock held)."""
        self.batches += 1
        self.frames += frames
        self.infer_s += infer_s
        for stage, s in stages.items():
            self.stage_s[stage] += s
