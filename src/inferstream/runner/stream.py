"""One stream's way through inference (what a pyinfer hands each buffer to): map, infer in the batch group, write,
track. No GStreamer here (R6): buffers are opaque, mapped through ``frames.memory`` and written through
``meta.writers`` / ``meta.nvds``; tests give a mapper and a writer of their own.

``StreamRunner.process`` is the whole per-buffer path, in one place:

- a frame skipped by ``interval``: not inferred, only tracked (when a tracker is seated);
- NVMM (a DeepStream muxed batch per buffer): inferred at once, written as NvDs metadata, then tracked;
- ``process-mode=secondary``: the frame's selected objects classified (in a batch when any needs the model);
- otherwise: one frame of the group's next batch; the batch's thread maps, infers, writes and tracks it
  (``batching.BatchGroup``, ``runner.tracking.track_batch``) while this thread waits — or, through ``submit``,
  goes on to the stream's next frames and waits for this one later (``wait``: pyinfer's ``in-flight``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from inferstream.batching import BatchGroup, Member
    from inferstream.batching.slots import Pending
    from inferstream.detections import Detections
    from inferstream.frames.memory import Mapper
    from inferstream.frames.system import FrameFormat
    from inferstream.inference import ModelStep
    from inferstream.models.base import DecodeParams
    from inferstream.runner.settings import SecondarySettings
    from inferstream.runner.tracking import TrackStage
    from inferstream.secondary import ObjectFrame, ObjectsPlan


class Writer(Protocol):
    """Writes a frame's results onto its buffer (``meta.writers.AnalyticsWriter``)."""

    def detections(self, buf: Any, dets: Detections, labels: tuple[str, ...]) -> None: ...

    def classifications(self, buf: Any, od_ids: list[int], classes: list[int], scores: list[float],
                        labels: tuple[str, ...], producer: tuple[int, ...]) -> None: ...


class StreamRunner:
    """One stream of a batch group (``member``) with its decode parameters, writer and frame counter.

    Args:
        member: the stream's place in its batch group (``batching.groups.acquire_group``).
        params: the stream's thresholds.
        writer: the GstAnalytics writer; None where GstAnalytics is missing (NVMM input only).
        unique_id: the producer id (NvDs ``unique_component_id``).
        interval: frames skipped between two inferred ones (0: every frame).
        secondary: classify the objects upstream detectors wrote instead of inferring whole frames.
    """

    def __init__(self, member: Member, params: DecodeParams, writer: Writer | None, *, unique_id: int = 1,
                 interval: int = 0, secondary: SecondarySettings | None = None) -> None:
        self.member, self.params, self.writer, self.unique_id = member, params, writer, unique_id
        self._interval = interval
        self._secondary = _Secondary(secondary) if secondary is not None else None
        self._index = 0
        self._kind = "system"
        self._map: Mapper | None = None

    @property
    def group(self) -> BatchGroup:
        return self.member.group

    def set_memory(self, kind: str, fmt: FrameFormat | None, device: int | None = None,
                   mapper: Mapper | None = None) -> None:
        """The negotiated memory kind (``frames.memory.MEMORY_KINDS``) and frame format, once per caps; ``mapper``
        replaces the one ``frames.memory`` picks (tests map tensors)."""
        from inferstream.frames.memory import frame_mapper

        self._kind = kind
        self._map = mapper or (None if kind == "nvmm" else frame_mapper(kind, fmt, device))

    def restart(self) -> None:
        """A new stream or a flushing seek: frame numbers (``interval``, reinfer) count from 0 again."""
        self._index = 0

    def seat(self, stage: TrackStage | None) -> None:
        """Register ``stage`` (a tracker offered at this stream's next element) with this stream's member of the
        group: from now on it tracks every frame this runner passes on (see ``runner.tracking``)."""
        from inferstream.runner.tracking import seat

        if stage is not None:
            seat(stage, self.member)

    def process(self, buf: Any) -> None:
        """Infer ``buf`` (or skip it), write the results onto it and track it; raises what failed (mapping,
        inference, writing; tracking failures stay the tracker's, see ``TrackStage.take_error``)."""
        if self.next_is_batched():
            self.wait(self.submit(buf))
        else:
            self.later(buf)()

    def next_is_batched(self) -> bool:
        """Whether the next buffer will be one frame of a batch of the group (``submit``), rather than done at once
        (skipped by ``interval``, NVMM, secondary)."""
        return self._kind != "nvmm" and self._secondary is None and self._inferred(self._index)

    def submit(self, buf: Any) -> Pending:
        """Hand ``buf`` to the group's next batch without waiting for it (``next_is_batched`` must be true): the
        batch maps, infers, writes and tracks it; ``wait`` returns once it did."""
        return self.reserve(buf)()

    def reserve(self, buf: Any) -> Callable[[], Pending]:
        """``submit`` in two steps: the frame number is taken now, the buffer handed over when the call returned
        is called (once the buffer is writable: pyinfer's ``in-flight`` hands a buffer over on the next one)."""
        self._index += 1
        return lambda: self.group.submit(_FrameJob(self, buf), self.params, self.member)

    def wait(self, pending: Pending) -> None:
        """Block until the frame of ``pending`` is done; raises what failed (as ``process``)."""
        self.group.wait(pending)

    def later(self, buf: Any) -> Callable[[], None]:
        """What a buffer that is not batched (``next_is_batched`` false) takes, to run once the frames before it
        are done (its frame number is taken now): skipped by ``interval``, it is tracked; NVMM or secondary, it is
        inferred, written and tracked."""
        index, self._index = self._index, self._index + 1
        return lambda: self._at_once(buf, index)

    def _inferred(self, index: int) -> bool:
        """Whether frame ``index`` of the stream is inferred (not skipped by ``interval``)."""
        return not (self._interval and index % (self._interval + 1))

    def _at_once(self, buf: Any, index: int) -> None:
        if self._inferred(index):
            if self._kind == "nvmm":
                from inferstream.meta.nvds import infer_nvmm_batch

                infer_nvmm_batch(buf, lambda frames: self.group.infer_batch(frames, self.params), self.unique_id)
            elif self._secondary is not None and self._secondary.run(self, buf, index):
                return  # tracked in the batch
        tracker = self.member.tracker
        if tracker is not None:
            tracker.track_seated(buf)

    def map(self, buf: Any) -> AbstractContextManager[Any]:
        if self._map is None:
            raise RuntimeError("no frame mapping: caps not set, or NVMM memory (mapped as a batch)")
        return self._map(buf)


class _FrameJob:
    """One buffer's part of a batch (``batching.FrameJob``), run by the batch's thread while the stream's thread
    waits: map the buffer in place, write the detections onto it."""

    __slots__ = ("buf", "runner")

    def __init__(self, runner: StreamRunner, buf: Any) -> None:
        self.runner, self.buf = runner, buf

    def frame(self) -> AbstractContextManager[Any]:
        return self.runner.map(self.buf)

    def deliver(self, dets: Detections, model: ModelStep) -> None:
        writer = self.runner.writer
        if writer is None:
            raise RuntimeError("no GstAnalytics writer for system or CUDA memory")
        writer.detections(self.buf, dets, model.labels)


class _Secondary:
    """``process-mode=secondary``: which objects of a frame to classify, the stream's reinfer cache and the
    producer record, around the group's ``secondary.ObjectClassifier``."""

    def __init__(self, settings: SecondarySettings) -> None:
        from inferstream.meta.classifications import producer_record_quarks
        from inferstream.secondary import ReinferCache

        self.filter = settings.filter
        self.cache = ReinferCache(settings.reinfer_interval)
        self.producer = producer_record_quarks(settings.unique_id, settings.classifier_type)

    def run(self, runner: StreamRunner, buf: Any, frame: int) -> bool:
        """Classify ``buf``'s selected objects and write the results; True when that took a batch (a frame without
        (selected) objects passes unchanged, one whose objects all reuse their results needs no model)."""
        from inferstream.meta.gstanalytics import read_detections
        from inferstream.secondary import plan_objects

        meta = read_detections(buf, self.filter.unique_id)
        if meta is None or not len(meta.dets):
            return False
        plan = plan_objects(meta.dets, meta.label_names, meta.od_ids, meta.producers, self.filter, self.cache, frame)
        if plan is None:
            return False
        if not plan.todo:
            self.write(runner, buf, plan, None, runner.group.model, frame)
            return False
        # the group's model is an ObjectClassifier: its jobs map ObjectFrames, not bare RawFrames
        job = _ObjectJob(runner, self, buf, plan, frame)
        runner.group.infer(job, runner.params, runner.member)  # type: ignore[arg-type]
        return True

    def write(self, runner: StreamRunner, buf: Any, plan: ObjectsPlan, classified: Detections | None,
              model: ModelStep, frame: int) -> None:
        od_ids, labels, scores = plan.results(classified)
        if classified is not None:
            self.cache.store([plan.track_ids[i] for i in plan.todo], classified.labels.tolist(),
                             classified.scores.tolist(), frame)
        if runner.writer is None:
            raise RuntimeError("no GstAnalytics writer for the classifications")
        runner.writer.classifications(buf, od_ids, labels, scores, model.labels, self.producer)


class _ObjectJob:
    """One buffer's objects in a batch (``batching.FrameJob``): the mapped frame with the boxes to classify; the
    results are written onto the buffer, with the reused ones."""

    __slots__ = ("buf", "frame_number", "plan", "runner", "secondary")

    def __init__(self, runner: StreamRunner, secondary: _Secondary, buf: Any, plan: ObjectsPlan,
                 frame_number: int) -> None:
        self.runner, self.secondary, self.buf, self.plan, self.frame_number = (runner, secondary, buf, plan,
                                                                               frame_number)

    def frame(self) -> AbstractContextManager[ObjectFrame]:
        return _mapped_objects(self.runner.map, self.buf, self.plan)

    def deliver(self, dets: Detections, model: ModelStep) -> None:
        self.secondary.write(self.runner, self.buf, self.plan, dets, model, self.frame_number)


@contextmanager
def _mapped_objects(map_frame: Callable[[Any], AbstractContextManager[Any]], buf: Any,
                    plan: ObjectsPlan) -> Iterator[ObjectFrame]:
    """The buffer mapped as the stream maps its frames (system or CUDA memory), with the boxes to classify."""
    from inferstream.secondary import ObjectFrame

    with map_frame(buf) as raw:
        yield ObjectFrame(raw, plan.boxes)
