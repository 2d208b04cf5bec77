"""Cross-stream dynamic batching: pyinfer instances naming the same batch-group share one ModelStep.

Each streaming thread calls ``BatchGroup.infer(job, params, member)`` and blocks until its frame has been inferred
and the result delivered. There is no batching thread: the thread whose arrival fills the batch — or whose oldest
waiting frame has waited ``max_latency`` — runs the batch for everyone (one thread hop fewer per frame), including
the per-frame work around it (``FrameJob``: mapping the frame, writing its metadata), and the tracking of the
batch's frames whose stream has a tracker registered (``Member.tracker``, see ``runner.tracking``). The waiting
threads then run no Python at all until their frame is done, so the batch's thread does not compete with them for
the GIL; a batch is a ``serial.priority`` section, so shared workers (pytracker's) hold their jobs back meanwhile
too. A batch is "full" at ``batch_size`` frames or when every live member has a frame waiting, so a stream that
ended (``leave``) is never waited for. Model swaps happen between batches, under the same lock that runs them: every
frame is inferred by exactly one model. The replaced model stays loaded until the new one has inferred its first
real batch: if that batch fails (a model that passed warm-up but breaks on real frames), the old one is put back and
infers it.

A stream may have several frames in the group at once (``submit`` hands a frame over without waiting, ``wait`` waits
for it: pyinfer's ``in-flight``): a batch then takes at most one frame per stream, the oldest, and batches run and
deliver in the order they were taken, so a stream's frames are inferred, written and tracked in order.
"""
from __future__ import annotations

import contextlib
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from inferstream.batching.slots import BatchStats, BatchTracker, FrameJob, Pending
from inferstream.shared_worker import priority

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from inferstream.batching.completion import Completion
    from inferstream.detections import Detections
    from inferstream.inference import InferConfig, ModelStep, Ticket
    from inferstream.models.base import DecodeParams
    from inferstream.rawframe import RawFrame


@dataclass(eq=False)
class Member:
    """One stream of a batch group (one pyinfer).

    Attributes:
        group: the group.
        index: how many members the group had before this one joined (the stream's default source id).
        tracker: the stream's tracker, registered here (``runner.tracking.seat``): once a batch is delivered, its
            thread tracks the frames of every member that has one, in one update.
        in_flight: how many frames the stream may have in the group at once: above 1, a batch of a model server is
            finished by the group's completion thread, so that the thread that filled it can bring its next frame.
    """

    group: BatchGroup
    index: int
    tracker: BatchTracker | None = None
    in_flight: int = 1  # frames of this stream in the group at once (pyinfer's in-flight)


class BatchGroup:
    """One model and its batch queue, shared by the members of a batch-group."""

    def __init__(self, name: str, cfg: InferConfig, model: ModelStep, batch_size: int, max_latency_s: float):
        self.name, self.cfg, self.batch_size, self.max_latency_s = name, cfg, batch_size, max_latency_s
        self.model = model
        self.stats = BatchStats()
        self._members = 0
        self._live = 0
        self._pending: list[Pending] = []
        self._lock = threading.Lock()
        self._run_lock = threading.Lock()  # held while a batch maps and is handed to the model
        self._order = threading.Condition()  # batches take the run lock in the order they were taken
        self._taken = 0  # batches taken so far (the next one's turn number)
        self._turn = 0  # the turn number of the batch allowed to take the run lock next
        self._deliver_lock = threading.Lock()  # held while a batch delivers; taken before _run_lock is let go
        self._completion: Completion | None = None  # the thread that finishes a served model's batches
        self._fallback: tuple[ModelStep, Callable[[ModelStep, BaseException], None] | None] | None = None

    # membership -------------------------------------------------------------------------------------------
    @property
    def members(self) -> int:
        return self._members

    def join(self) -> Member:
        with self._lock:
            member = Member(self, self._members)
            self._members += 1
            self._live += 1
            return member

    def leave_stream(self) -> None:
        """The member's stream ended (EOS): stop counting it as a frame source (waiting frames may now be full)."""
        with self._lock:
            self._live = max(0, self._live - 1)
            self._wake_oldest()

    def rejoin_stream(self) -> None:
        """The member's stream runs again after EOS (a flushing seek)."""
        with self._lock:
            self._live = min(self._members, self._live + 1)

    def release(self) -> int:
        """Drop one member; returns the members left (0: the caller closes the group)."""
        with self._lock:
            self._members -= 1
            self._live = min(self._live, self._members)
            self._wake_oldest()
            return self._members

    def close(self) -> None:
        """Once the last member has gone: wait for the batches under way, then close the model (and the one a swap
        kept to fall back on)."""
        with self._run_lock:
            self._drain()
        self.model.close()
        if self._fallback is not None:
            self._fallback[0].close()

    # inference --------------------------------------------------------------------------------------------
    def infer(self, job: FrameJob, params: DecodeParams, member: Member | None = None) -> None:
        """Run ``job`` in a batch; returns once it was delivered (and tracked, when ``member`` has a tracker).
        Raises what mapping, inference or delivery raised."""
        self.wait(self.submit(job, params, member))

    def submit(self, job: FrameJob, params: DecodeParams, member: Member | None = None) -> Pending:
        """Hand ``job`` to the group without waiting for it (``wait`` does); when its arrival fills a batch, this
        thread runs that batch first."""
        slot = Pending(job, params, member, time.monotonic())
        with self._lock:
            self._pending.append(slot)
            batch = self._take_batch_locked()
        if batch:
            self._run(batch)
        return slot

    def wait(self, slot: Pending) -> None:
        """Block until ``slot`` was delivered; raises what mapping, inference or delivery raised.

        Only the thread that will lead is woken: the one whose arrival fills the batch ran it in ``submit``; the
        others sleep on their own slot until it is done, or until their frame has waited ``max_latency`` (then the
        oldest waiting frame's thread leads), or until ``_wake_oldest`` asks the oldest to check. Waking every
        waiting thread at each arrival (a shared condition) cost O(N²) wake-ups and GIL hand-offs per batch of N.
        """
        while not slot.done:
            slot.wake.wait(None if slot.taken else max(0.0, slot.arrived + self.max_latency_s - time.monotonic()))
            with self._lock:
                batch = [] if slot.done else self._take_batch_locked()
            if batch:
                self._run(batch)
        if slot.error is not None:
            raise slot.error

    def _take_batch_locked(self) -> list[Pending]:
        """The next batch when it is full or its oldest frame has waited ``max_latency``, else []: the oldest
        frames, at most one per member (a member's next frame waits for the next batch)."""
        pending = self._pending
        if not pending:
            return []
        need = min(self.batch_size, max(self._live, 1))
        timed_out = time.monotonic() - pending[0].arrived >= self.max_latency_s
        if len(pending) < need and not timed_out:
            return []
        batch: list[Pending] = []
        later: list[Pending] = []
        members: set[Member] = set()
        for s in pending:
            if len(batch) < self.batch_size and s.member not in members:
                batch.append(s)
                if s.member is not None:
                    members.add(s.member)
            else:
                later.append(s)
        if len(batch) < need and not timed_out:
            return []
        self._pending = later
        for s in batch:
            s.taken = True
        batch[0].turn = self._taken
        self._taken += 1
        return batch

    def _wake_oldest(self) -> None:
        """Ask the oldest waiting frame's thread to check whether it should lead (call with the lock held)."""
        if self._pending:
            self._pending[0].wake.set()

    def _run(self, batch: list[Pending]) -> None:
        """Hand the batch to the model, then deliver it (``_deliver_in_order``: collect its detections), in two
        phases so that two batches can be in flight: while this one writes its metadata (host work), the next one
        may already map its frames and wait on the model (the GIL released). Batches run in the order they were
        taken (``_take_turn``) and deliver in the order they ran (hand-over-hand locks). A model that runs a batch
        on its own (a model server: ``ModelStep.lanes``) leaves the finishing to the group's ``Completion``
        thread, in the same order, and this thread goes back to its stream at once."""
        t0 = time.monotonic()
        mapped = ExitStack()
        try:
            with self._take_turn(batch[0].turn):
                turn_wait = time.monotonic() - t0
                model = self.model
                completion = self._completion_for(model, batch)
                if completion is not None:
                    completion.reserve()
                try:
                    with priority():
                        handed = self._hand_over(batch, mapped, collect=completion is None)
                except BaseException:
                    if completion is not None:
                        completion.release()
                    raise
                if completion is not None:
                    completion.put(partial(self._finish, batch, handed, mapped, model, t0, turn_wait, completion))
                    return
                self._deliver_lock.acquire()  # before the next batch may start: delivery keeps the order
            try:
                stages = self._deliver_in_order(handed, mapped, model, None)
            finally:
                self._deliver_lock.release()
            self._settle(batch, t0, turn_wait, stages)
        except BaseException as exc:  # delivered to every waiting thread, which posts it
            mapped.close()
            self._done(batch, exc)

    def _finish(self, batch: list[Pending], handed: tuple[list[Pending], Ticket | None], mapped: ExitStack,
                model: ModelStep, t0: float, turn_wait: float, completion: Completion) -> None:
        """The completion thread's part of a batch (``_run`` does the same in line): never raises."""
        self._settle(batch, t0, turn_wait, self._deliver_in_order(handed, mapped, model, completion))

    def _deliver_in_order(self, handed: tuple[list[Pending], Ticket | None], mapped: ExitStack, model: ModelStep,
                          completion: Completion | None) -> dict[str, float] | BaseException:
        """Collect the batch's detections (waiting for the model if it runs on its own: its lane is free then),
        deliver them and unmap its frames (still in order: a failure there fails the whole batch). The batch's
        stages, or what failed it."""
        try:
            with mapped:
                try:
                    with priority():
                        inferred, stages = self._collect(*handed)
                finally:
                    if completion is not None:
                        completion.release()
                t1 = time.monotonic()
                with priority():
                    self._deliver(inferred, model)
            return {**stages, "deliver": time.monotonic() - t1}
        except BaseException as exc:  # e.g. unmapping failed
            return exc

    def _settle(self, batch: list[Pending], t0: float, turn_wait: float,
                outcome: dict[str, float] | BaseException) -> None:
        """Count the batch (``outcome``: its stages) or fail it (what failed it); then its frames are done."""
        if isinstance(outcome, BaseException):
            self._done(batch, outcome)
            return
        self._count(batch, t0, {"turn-wait": turn_wait, **outcome})
        self._done(batch)

    def _done(self, batch: list[Pending], exc: BaseException | None = None) -> None:
        """The batch's frames are done (with ``exc`` unless a frame has its own error); its threads wait for
        nothing else (they wait without a timeout)."""
        for s in batch:
            s.error = s.error or exc
            s.done = True
            s.wake.set()
        with self._lock:
            self._wake_oldest()  # frames that arrived meanwhile may form the next batch

    def _completion_for(self, model: ModelStep, batch: list[Pending]) -> Completion | None:
        """The group's completion thread when ``model`` runs batches on its own and a stream may bring its next
        frame meanwhile (started at the first such batch, then kept for every batch until a swap, so that they
        deliver in order), else None: with one frame per stream, every thread waits for its own frame anyway and
        a thread hop would only cost. Called under the run lock, as swaps are."""
        ahead = any(s.member is not None and s.member.in_flight > 1 for s in batch)
        if not model.lanes or (self._completion is None and not ahead):
            return None
        if self._completion is None:
            from inferstream.batching.completion import Completion

            self._completion = Completion(self.name, model.lanes)
        return self._completion

    def _drain(self) -> None:
        """Wait until the completion thread has finished every batch handed over, and end it (under the run lock:
        no batch is handed over meanwhile); the next model that needs one gets its own."""
        if self._completion is not None:
            self._completion.close()
            self._completion = None

    @contextlib.contextmanager
    def _take_turn(self, turn: int) -> Iterator[None]:
        """The run lock, taken only once every batch taken before turn ``turn`` has taken it."""
        with self._order:
            while self._turn != turn:
                self._order.wait()
        with self._run_lock:
            with self._order:
                self._turn += 1
                self._order.notify_all()
            yield

    def _count(self, batch: list[Pending], t0: float, stages: dict[str, float]) -> None:
        t1 = time.monotonic()
        with self._lock:
            self.stats.add(len(batch), t1 - t0, stages)
            self.stats.wait_s += sum(t0 - s.arrived for s in batch)

    def _hand_over(self, batch: list[Pending], mapped: ExitStack, collect: bool) -> tuple[list[Pending],
                                                                                       Ticket | None]:
        """Map every frame (into ``mapped``) and hand them to the model in one batch (``collect``: and wait for its
        results); a frame that fails to map fails alone. The frames handed over and their ticket (None: none
        was)."""
        ready, frames = [], []
        for s in batch:
            try:
                frames.append(mapped.enter_context(s.job.frame()))
                ready.append(s)
            except BaseException as exc:
                s.error = exc
        if not ready:
            return [], None
        try:
            # frames with other thresholds could share a forward pass; keep it simple: the group's params
            return ready, self._prepare_or_roll_back(frames, ready[0].params, collect)
        except BaseException as exc:
            for s in ready:
                s.error = exc
            return [], None

    @staticmethod
    def _collect(ready: list[Pending], ticket: Ticket | None) -> tuple[list[tuple[Pending, Detections]],
                                                                        dict[str, float]]:
        """The handed-over frames with their detections, and the batch's model stages (none if it failed)."""
        if ticket is None:
            return [], {}
        try:
            results = ticket.result()
        except BaseException as exc:
            for s in ready:
                s.error = exc
            return [], {}
        return list(zip(ready, results)), ticket.stage_s

    def _prepare_or_roll_back(self, frames: list[RawFrame], params: DecodeParams, collect: bool = True) -> Ticket:
        """The model's ticket for the batch. The first batch of a swapped-in model is inferred here and now: should
        it fail, the model it replaced infers it again."""
        fallback, self._fallback = self._fallback, None
        if fallback is None:
            return self.model.prepare(frames, params, collect)
        try:
            ticket = self.model.prepare(frames, params, collect=True)
        except Exception as exc:
            failed, (self.model, on_rollback) = self.model, fallback
            self.cfg = self.model.cfg
            failed.close()
            if on_rollback is not None:
                on_rollback(failed, exc)
            return self.model.prepare(frames, params, collect=True)
        fallback[0].close()  # the new model has proved itself on real frames
        return ticket

    @staticmethod
    def _deliver(inferred: list[tuple[Pending, Detections]], model: ModelStep) -> None:
        """Hand each frame its detections (a failing frame fails alone), then track the delivered frames of the
        members with a tracker, all in one call (``runner.tracking.track_batch``: its failures stay each
        tracker's)."""
        tracked = []
        for s, dets in inferred:
            try:
                s.job.deliver(dets, model)
            except BaseException as exc:
                s.error = exc
                continue
            tracker = s.member.tracker if s.member is not None else None
            if tracker is not None:
                tracked.append((tracker, s.job.buf))
        if tracked:
            tracked[0][0].track_together(tracked)

    def infer_batch(self, frames: list[RawFrame], params: DecodeParams) -> tuple[list[Detections], tuple[str, ...]]:
        """Infer frames that already form a batch (a DeepStream nvstreammux buffer) and return them with the
        model's labels; under the run lock, so a hot swap waits for it (and rolls back) as for the group's own."""
        t0 = time.monotonic()
        with self._run_lock:
            self._drain()  # a served model's batches in flight are collected first: they hold its lanes
            ticket = self._prepare_or_roll_back(frames, params)
            dets = ticket.result()
            labels = self.model.labels
            stages = ticket.stage_s
        with self._lock:
            self.stats.add(len(frames), time.monotonic() - t0, stages)
        return dets, labels

    def swap(self, model: ModelStep,
             on_rollback: Callable[[ModelStep, BaseException], None] | None = None) -> ModelStep:
        """Install ``model`` between two batches; returns the old one, which the group keeps (and closes once
        the new one has inferred a batch). Should that first batch fail, the old one comes back, infers it, and
        ``on_rollback(failed_model, error)`` is called on the batch's thread (the group closes the failed one)."""
        with self._run_lock, self._deliver_lock:
            self._drain()  # no batch in flight
            old, self.model = self.model, model
            if self._fallback is not None:  # a swap before the previous new model ran a batch: keep the proven one
                old.close()
                old = self._fallback[0]
            self._fallback = (old, on_rollback)
            self.cfg = model.cfg
            return old
