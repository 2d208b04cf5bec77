"""pyinfer's secondary mode (``process-mode=secondary``): the per-frame glue between the buffer's metadata and
``inferstream.secondary`` (which objects, which reuse a cached result, the batched crop-and-classify runner)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from contextlib import AbstractContextManager

    from gi.repository import Gst

    from inferstream.batching import FollowUp
    from inferstream.detections import Detections
    from inferstream.elements.pyinfer import PyInfer
    from inferstream.inference import Detector
    from inferstream.secondary import ObjectFilter, ObjectFrame, ObjectsPlan, ReinferCache


@dataclass
class Secondary:
    """A secondary pyinfer's settings (read once at start) and its stream's reinfer cache."""

    filter: ObjectFilter
    cache: ReinferCache
    producer: tuple[int, ...]

    @classmethod
    def from_element(cls, el: PyInfer) -> Secondary:
        from inferstream.meta.classifications import producer_record_quarks
        from inferstream.secondary import ReinferCache, parse_filter

        flt = parse_filter(el.operate_on_unique_id, el.operate_on_classes, el.min_object_size)
        kind = el.classifier_type or f"classifier{el.unique_id}"
        return cls(flt, ReinferCache(el.reinfer_interval), producer_record_quarks(el.unique_id, kind))

    def run(self, el: PyInfer, buf: Gst.Buffer, frame: int) -> None:
        """Classify ``buf``'s selected objects (in a batch when any needs the model) and write the results; a frame
        without (selected) objects passes unchanged."""
        from inferstream.meta.gstanalytics import read_detections
        from inferstream.secondary import plan_objects

        meta = read_detections(buf, self.filter.unique_id)
        if meta is None or not len(meta.dets):
            return
        plan = plan_objects(meta.dets, meta.label_names, meta.od_ids, meta.producers, self.filter, self.cache, frame)
        if plan is None:
            return
        group, params = el._group, el._params
        if group is None or params is None:
            raise RuntimeError(f"{el.get_name()} is not started")
        if plan.todo:
            # the group's runner is an ObjectClassifier: its jobs map ObjectFrames, not bare RawFrames
            group.infer(_ObjectJob(el, self, buf, plan, frame), params)  # type: ignore[arg-type]
        else:
            self.write(el, buf, plan, None, group.detector, frame)

    def write(self, el: PyInfer, buf: Gst.Buffer, plan: ObjectsPlan, classified: Detections | None,
              detector: Detector, frame: int) -> None:
        from inferstream.meta.classifications import write_classifications

        od_ids, labels, scores = plan.results(classified)
        if classified is not None:
            self.cache.store([plan.track_ids[i] for i in plan.todo], classified.labels.tolist(),
                             classified.scores.tolist(), frame)
        write_classifications(buf, od_ids, labels, scores, el._label_quarks(detector.labels), self.producer)


class _ObjectJob:
    """One buffer's objects in a batch (``batching.FrameJob``): the mapped frame with the boxes to classify; the
    results are written onto the buffer, with the reused ones."""

    __slots__ = ("buf", "element", "frame_number", "plan", "secondary")

    def __init__(self, element: PyInfer, secondary: Secondary, buf: Gst.Buffer, plan: ObjectsPlan,
                 frame_number: int) -> None:
        self.element, self.secondary, self.buf, self.plan, self.frame_number = (element, secondary, buf, plan,
                                                                                frame_number)

    def frame(self) -> AbstractContextManager[ObjectFrame]:
        return _mapped_objects(self.element, self.buf, self.plan)

    def deliver(self, dets: Detections, detector: Detector) -> FollowUp | None:
        self.secondary.write(self.element, self.buf, self.plan, dets, detector, self.frame_number)
        return None


@contextmanager
def _mapped_objects(el: PyInfer, buf: Gst.Buffer, plan: ObjectsPlan) -> Iterator[ObjectFrame]:
    """The buffer mapped as pyinfer maps it (system or CUDA memory), with the boxes to classify."""
    from inferstream.elements.pyinfer import _InferJob
    from inferstream.secondary import ObjectFrame

    with _InferJob(el, buf).frame() as raw:
        yield ObjectFrame(raw, plan.boxes)
