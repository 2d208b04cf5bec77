"""Secondary inference (nvinfer's ``process-mode=2``): classify the objects an upstream detector found.

GStreamer-free (R6): which objects to classify (``ObjectFilter``), which tracked objects can reuse their last
result (``ReinferCache``), and the runner that crops every object of a batch of frames at once on the model's
device and classifies them in one forward pass (``ObjectClassifier``). The element reads the objects from the
buffer's metadata and writes the results back (``meta.classifications``).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from inferstream.errors import ConfigError
from inferstream.inference import InferConfig, ModelStep, Ticket, _on_stream

if TYPE_CHECKING:
    import torch

    from inferstream.detections import Detections
    from inferstream.models.base import DecodeParams
    from inferstream.rawframe import RawFrame


@dataclass(frozen=True, slots=True)
class ObjectFilter:
    """Which upstream objects a secondary classifies (nvinfer's operate-on-gie-id, operate-on-class-ids,
    input-object-min-width/height).

    Attributes:
        unique_id: only objects of this producer; None: of any producer.
        labels: only objects with one of these labels; None: any label.
        min_size: (width, height) in frame pixels an object must reach in both directions.
    """

    unique_id: int | None = None
    labels: frozenset[str] | None = None
    min_size: tuple[int, int] = (0, 0)

    def rows(self, dets: Detections, label_names: Sequence[str], producers: Sequence[int]) -> list[int]:
        """Indices of the rows to classify, in row order.

        Args:
            dets: the frame's objects (CPU); ``labels`` index into ``label_names``.
            label_names: the per-buffer label table.
            producers: the producer id of each row.
        """
        import torch

        keep = torch.ones(len(dets), dtype=torch.bool)
        if self.unique_id is not None:
            keep &= torch.tensor([p == self.unique_id for p in producers], dtype=torch.bool)
        if self.labels is not None:
            wanted = torch.tensor([name in self.labels for name in label_names] or [False], dtype=torch.bool)
            keep &= wanted[dets.labels]
        if self.min_size != (0, 0):
            wh = dets.boxes_xyxy[:, 2:] - dets.boxes_xyxy[:, :2]
            keep &= (wh[:, 0] >= self.min_size[0]) & (wh[:, 1] >= self.min_size[1])
        return keep.nonzero().flatten().tolist()


def parse_filter(unique_id: int, classes: str, min_size: str) -> ObjectFilter:
    """The element's ``operate-on-unique-id`` (-1: any), ``operate-on-classes`` (labels, comma-separated) and
    ``min-object-size`` (``WxH`` or ``N``) as an ObjectFilter.

    Raises:
        ConfigError: a malformed size.
    """
    labels = frozenset(c.strip() for c in classes.split(",") if c.strip()) or None
    text = min_size.strip().lower()
    try:
        w, _, h = text.partition("x")
        size = (int(w), int(h or w)) if text else (0, 0)
    except ValueError:
        raise ConfigError(f"min-object-size {min_size!r}: expected WIDTHxHEIGHT or N, e.g. 32x64") from None
    if min(size) < 0:
        raise ConfigError(f"min-object-size {min_size!r}: sizes must be >= 0")
    return ObjectFilter(None if unique_id < 0 else unique_id, labels, size)


class ReinferCache:
    """One stream's last classification per track id (nvinfer's ``secondary-reinfer-interval``).

    A tracked object is classified again once ``interval`` frames have passed since it last was; in between its
    cached result is re-attached. Untracked objects (no TrackingMtd, id -1) are classified on every frame, and
    ``interval`` 0 classifies everything every frame. Tracks absent from a frame are forgotten.
    """

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self._last: dict[int, tuple[int, int, float]] = {}  # track id -> (frame, label, score)

    def plan(self, track_ids: Sequence[int], frame: int) -> tuple[list[int], dict[int, tuple[int, float]]]:
        """Split a frame's objects into those to classify and those whose cached result is reused.

        Args:
            track_ids: track id per object (-1: untracked).
            frame: the stream's frame number.

        Returns:
            ``(todo, reused)``: row indices to classify, and row index -> (label, score) for the others.
        """
        if not self.interval:
            return list(range(len(track_ids))), {}
        present = {t for t in track_ids if t >= 0}
        self._last = {t: v for t, v in self._last.items() if t in present}
        todo, reused = [], {}
        for row, t in enumerate(track_ids):
            hit = self._last.get(t) if t >= 0 else None
            if hit is None or frame - hit[0] >= self.interval:
                todo.append(row)
            else:
                reused[row] = hit[1:]
        return todo, reused

    def store(self, track_ids: Sequence[int], labels: Sequence[int], scores: Sequence[float], frame: int) -> None:
        """Remember the results just computed for these (tracked) objects."""
        if self.interval:
            for t, label, score in zip(track_ids, labels, scores):
                if t >= 0:
                    self._last[t] = (frame, label, score)


@dataclass(frozen=True, slots=True)
class ObjectFrame:
    """A mapped frame and the boxes to classify on it (what a secondary's FrameJob hands the batch).

    Attributes:
        frame: the frame's plane views (valid while mapped).
        boxes (Tensor[K, 4]): float32 xyxy in frame pixels, K >= 1.
    """

    frame: RawFrame
    boxes: torch.Tensor


class ObjectClassifier(ModelStep):
    """A classifier run on object crops: every object of a batch of frames is cropped and resized in one batched
    gather on the model's device (``ops.crop``), normalised as its family says, and classified in one forward
    pass; top-1 and probability cross to the host in one copy.

    ``infer`` returns, per frame, Detections of its boxes (as given) with ``labels`` = top-1 class and ``scores``
    = its probability. Object counts vary from batch to batch, so ``graph=auto`` runs eagerly here.
    """

    def __init__(self, cfg: InferConfig) -> None:
        super().__init__(replace(cfg, graph="off") if cfg.graph == "auto" else cfg)
        if "classes" not in getattr(self._family_spec(), "kinds", ()):
            raise ConfigError(f"secondary inference needs a classifier (one (B, nc) output); this model's outputs "
                              f"{self.output_shapes} are family {self.family!r}")

    def _blank_batch(self) -> list[Any]:
        """The blank frame with one object that covers it (the warm-up's batch)."""
        import torch

        (frame,) = super()._blank_batch()
        return [ObjectFrame(frame, torch.tensor([[0.0, 0.0, float(frame.width), float(frame.height)]]))]

    def prepare(self, frames: Sequence[RawFrame | ObjectFrame], params: DecodeParams | None = None,
                collect: bool = True) -> Ticket:
        """``infer``, done now whatever ``collect`` says (the batch group's entry)."""
        dets = self.infer(frames, params)
        return Ticket.done(dets, dict(self.stage_s))

    def infer(self, frames: Sequence[RawFrame | ObjectFrame], params: DecodeParams | None = None) -> list[Detections]:
        """Per frame, its objects' top-1 class and probability (see the class docstring)."""
        import torch

        from inferstream.detections import Detections
        from inferstream.models.classifier import top1
        from inferstream.ops.color import to_rgb
        from inferstream.ops.crop import crop_resize, pixel_boxes
        from inferstream.ops.letterbox import normalise_

        items = [f for f in frames if isinstance(f, ObjectFrame)]
        if len(items) != len(frames):
            raise TypeError("ObjectClassifier.infer: expected ObjectFrame items (frame + boxes)")
        device, spec = self.backend.device, self.preprocess
        counts = [len(it.boxes) for it in items]
        t0 = time.monotonic()
        with torch.inference_mode(), _on_stream(self._stream):
            images = [to_rgb(it.frame, device) for it in items]
            boxes = torch.cat([pixel_boxes(it.boxes, it.frame.height, it.frame.width) for it in items])
            ids = torch.repeat_interleave(torch.arange(len(items)), torch.tensor(counts))
            x = crop_resize(images, boxes, ids, self.input_size)  # float32: fp16 would round the interpolation
            if spec.bgr:
                x = x.flip(1)
            if spec.normalises:
                normalise_(x, spec.mean, spec.std)
            t1 = time.monotonic()
            outputs = self.backend(x.to(self.backend.dtype))
            t2 = time.monotonic()
            labels, probs = top1(outputs[0])
            host = torch.stack([labels.double(), probs.double()]).cpu()
        out = [Detections.trusted(b, s, lab) for b, s, lab in zip(
            (it.boxes for it in items), host[1].float().split(counts), host[0].long().split(counts))]
        self._record_stages(t0, t1, t2)
        return out


@dataclass(frozen=True, slots=True)
class ObjectsPlan:
    """One frame's secondary work: which objects it classifies now and which reuse a cached result.

    Attributes:
        od_ids: ODMtd id of every selected object, in row order.
        track_ids: their track ids (-1: untracked).
        boxes (Tensor[K, 4]): the boxes of the objects to classify now (float32, frame pixels, CPU).
        todo: positions in ``od_ids`` of those K objects.
        reused: position -> (label, score) of the others.
    """

    od_ids: list[int]
    track_ids: list[int]
    boxes: torch.Tensor
    todo: list[int]
    reused: dict[int, tuple[int, float]]

    def results(self, classified: Detections | None) -> tuple[list[int], list[int], list[float]]:
        """``(od_ids, labels, scores)`` of every selected object: the new results (``classified``, K rows in
        ``todo`` order) and the reused ones."""
        labels, scores = [0] * len(self.od_ids), [0.0] * len(self.od_ids)
        for pos, (label, score) in self.reused.items():
            labels[pos], scores[pos] = label, score
        if classified is not None:
            for pos, label, score in zip(self.todo, classified.labels.tolist(), classified.scores.tolist()):
                labels[pos], scores[pos] = label, score
        return self.od_ids, labels, scores


def plan_objects(dets: Detections, label_names: Sequence[str], od_ids: Sequence[int], producers: Sequence[int],
                 flt: ObjectFilter, cache: ReinferCache, frame: int) -> ObjectsPlan | None:
    """Select a frame's objects (``flt``) and split them with ``cache``; None when none is selected.

    Args:
        dets, label_names, od_ids, producers: the frame's objects as ``meta.gstanalytics.read_detections`` reads
            them.
        flt: which objects to classify.
        cache: the stream's reinfer cache.
        frame: the stream's frame number.
    """
    import torch

    rows = flt.rows(dets, label_names, producers)
    if not rows:
        return None
    tracks = [-1] * len(rows) if dets.track_ids is None else dets.track_ids[torch.tensor(rows)].tolist()
    todo, reused = cache.plan(tracks, frame)
    picked = torch.tensor([rows[i] for i in todo], dtype=torch.int64)
    return ObjectsPlan([od_ids[r] for r in rows], tracks, dets.boxes_xyxy[picked], todo, reused)
