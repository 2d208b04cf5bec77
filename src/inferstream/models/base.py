"""Decoders turn one family's raw outputs into per-frame Detections in model-input pixels."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeGuard

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.detections import Detections

Shape: TypeAlias = "tuple[int | None, ...]"
"""An output's shape as the backend reports it; a dynamic dimension may be None (or any int < 1)."""


@dataclass(frozen=True, slots=True)
class DecodeParams:
    """Thresholds shared by every family (nvinfer's pre-cluster-threshold, nms-iou-threshold, topk)."""

    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    classes: tuple[int, ...] | None = None  # keep only these class ids
    agnostic: bool = False  # NMS across classes
    # (class id, threshold) pairs replacing ``conf`` for those classes (nvinfer's [class-attrs-N]
    # pre-cluster-threshold); a threshold of 1.0 drops the class (scores are never strictly above 1)
    class_conf: tuple[tuple[int, float], ...] = ()

    @property
    def min_conf(self) -> float:
        """The lowest threshold of any class: candidates below it can be dropped before anything else."""
        return min([self.conf, *(t for _, t in self.class_conf)])


def above_conf(scores: Tensor, labels: Tensor, params: DecodeParams) -> Tensor:
    """Which detections score strictly above their class's threshold (``class_conf``, else ``conf``).

    Args:
        scores (Tensor[...]): float scores.
        labels (Tensor[...]): integer class ids, same shape (a float class column is truncated).

    Returns:
        Tensor[...]: bool, same shape and device; no host sync.
    """
    if not params.class_conf:
        return scores > params.conf
    import torch

    top = max(c for c, _ in params.class_conf) + 1  # classes above the listed ones use ``conf`` (the last slot)
    table = torch.full((top + 1,), params.conf, dtype=scores.dtype, device=scores.device)
    for class_id, threshold in params.class_conf:
        table[class_id] = threshold
    return scores > table[labels.long().clamp(0, top)]


class Decoder(Protocol):
    """One model family's post-processing.

    Args:
        outputs: the backend's raw outputs for a batch of B frames.
        params: thresholds.

    Returns:
        B Detections, boxes in *model-input* pixels (letterboxed space); the runner inverts the letterbox.
    """

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]: ...


class FlatDecoder(Decoder, Protocol):
    """A decoder that can also return the whole batch's rows at once: the built-in ones do, so the runner copies
    them to the host in one piece and splits them there, with no per-image work on the device.

    Returns (``flat``):
        ``(image_ids [N] int64, rows)``: the rows of every image, grouped by image in batch order; boxes in
        model-input pixels.
    """

    def flat(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections]: ...


class MaskedDecoder(FlatDecoder, Protocol):
    """A flat decoder whose rows also carry instance-mask coefficients (``models.yolo_tasks.SegDecoder``): the runner
    assembles the masks at frame resolution once the boxes are in frame pixels (``ops.masks``).

    Returns (``flat_masked``): ``(image_ids [N], rows, coefficients [N, C])``; ``split_outputs``:
    ``(predictions, prototypes [B, C, mh, mw])``.
    """

    def flat_masked(self, outputs: list[Tensor], params: DecodeParams) -> tuple[Tensor, Detections, Tensor]: ...

    def split_outputs(self, outputs: list[Tensor]) -> tuple[Tensor, Tensor]: ...


def rows_only(decoder: object) -> TypeGuard[FlatDecoder]:
    """Whether ``decoder`` is a flat one whose rows are all there is: the built-in decoders without masks (a
    ``MaskedDecoder``'s rows still need their masks assembled at frame resolution, a user's decoder has no ``flat``)."""
    return hasattr(decoder, "flat") and not hasattr(decoder, "flat_masked")


RESIZES = ("letterbox", "stretch")
RESULT_KINDS = frozenset({"boxes", "oriented", "masks", "keypoints", "classes"})


@dataclass(frozen=True, slots=True)
class Preprocess:
    """How a family's models want their input tensor built from a frame (torch-free: read at plugin scan).

    The tensor is ``(rgb / 255 - mean) / std`` per channel (``bgr`` swaps the channel order first), placed by
    ``resize``: ``letterbox`` keeps the aspect ratio and pads with ``pad_value`` (a level, 0..255; the pad is
    normalised like the pixels), ``stretch`` fills the whole input (DETR families). ``resample`` is how the
    family's own predict resizes: ``cv2`` (OpenCV's uint8 ``INTER_LINEAR``, as ultralytics does) or ``float``
    (bilinear on float RGB, as torchvision's ``F.resize(antialias=False)`` in rfdetr and transformers); it picks
    ``preprocess=auto``'s path on the CPU. ``input_size`` is the default when neither the model nor the user sets
    one.
    """

    resize: str = "letterbox"
    pad_value: int = 114
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    bgr: bool = False
    resample: str = "cv2"
    input_size: tuple[int, int] = (640, 640)  # (height, width)

    def __post_init__(self) -> None:
        if self.resize not in RESIZES:
            raise ValueError(f"resize={self.resize!r}: expected one of {list(RESIZES)}")
        if self.resample not in ("cv2", "float"):
            raise ValueError(f"resample={self.resample!r}: expected 'cv2' or 'float'")
        if not 0 <= self.pad_value <= 255:
            raise ValueError(f"pad_value={self.pad_value}: expected a level in 0..255")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError(f"mean {self.mean} / std {self.std}: expected three values each, std > 0")

    @property
    def normalises(self) -> bool:
        """True when the [0, 1] RGB needs the mean/std step (or a channel swap) after resizing."""
        return self.bgr or self.mean != (0.0, 0.0, 0.0) or self.std != (1.0, 1.0, 1.0)


@dataclass(frozen=True, slots=True)
class PreprocessOverride:
    """The user's changes to a family's Preprocess (pyinfer's ``resize``, ``pad-value``, ``mean``, ``std``,
    ``channel-order``; nvinfer's ``maintain-aspect-ratio``, ``offsets``, ``net-scale-factor``): None keeps the
    family's value."""

    resize: str | None = None
    pad_value: int | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    bgr: bool | None = None

    def apply(self, spec: Preprocess) -> Preprocess:
        """``spec`` with every value set here replaced (checked as any Preprocess is)."""
        changes = {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}
        return replace(spec, **changes) if changes else spec


IMAGENET = Preprocess(resize="stretch", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), resample="float")
"""RF-DETR's and most transformers detectors' preprocessing: stretch, float resize, ImageNet mean/std."""


@dataclass(frozen=True, slots=True)
class Family:
    """One model family: how to recognise its outputs, build its decoder and its input, and what it yields.

    Attributes:
        name: the ``model-family`` value.
        layout: its outputs in words (error messages and ``gst-inspect-1.0 pyinfer`` list it).
        matches: ``(output_shapes, info) -> bool``, whether a model's outputs have this layout (auto-detection).
        build: ``(output_shapes, info, input_hw) -> Decoder``, checked against the outputs; ``input_hw`` is the
            (height, width) the model runs at (normalised boxes are scaled by it).
        preprocess: how frames become the model's input.
        kinds: which results it yields, a subset of ``RESULT_KINDS``.
        any_size: the decoder does not depend on the input size (boxes come out in input pixels), so a model
            that takes any size may run at the frames' stride-multiple rectangle (ultralytics' rect predict).
    """

    name: str
    layout: str
    matches: Callable[[Sequence[Shape], ModelInfo], bool]
    build: Callable[[Sequence[Shape], ModelInfo, tuple[int, int]], Decoder]
    preprocess: Preprocess = Preprocess()
    kinds: frozenset[str] = frozenset({"boxes"})
    any_size: bool = False

    def __post_init__(self) -> None:
        if not self.kinds <= RESULT_KINDS:
            raise ValueError(f"family {self.name}: unknown result kinds {sorted(self.kinds - RESULT_KINDS)}")
