"""Which decoder a model needs: auto-detection from its output layout and embedded hints, and the family table.

Extension points:

- A new built-in family is one entry in ``FAMILIES``: a ``Family(matches, build, layout)`` whose ``matches``
  recognises the output shapes (plus ``ModelInfo`` hints) and whose ``build`` returns a ``Decoder``. Auto
  detection tries every entry and needs exactly one to match; ``model-family=<name>`` skips detection.
- A user's own post-processing needs no change here: ``postprocess="package.module:function"`` names a function
  ``fn(outputs: list[Tensor], params: DecodeParams) -> list[Detections]`` (one Detections per frame, boxes in
  model-input pixels); ``load_postprocess`` imports it and wraps it as a ``Decoder``.

Shapes are the backend's output shapes; a dimension that is dynamic may be given as ``None`` (or any int < 1).
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, TypeAlias

from inferstream.detections import Detections
from inferstream.errors import ConfigError, UnsupportedModelError
from inferstream.models.yolo import AnchorFreeDecoder, EndToEndDecoder, ObbDecoder, ObbEndToEndDecoder

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.models.base import DecodeParams, Decoder

Shape: TypeAlias = "tuple[int | None, ...]"
_SPEC: Final = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


@dataclass(frozen=True, slots=True)
class Family:
    """One decoder family: how to recognise its outputs, how to build its decoder, and its layout in words."""

    matches: Callable[[Sequence[Shape], ModelInfo], bool]
    build: Callable[[Sequence[Shape], ModelInfo], Decoder]
    layout: str


def _dims(shapes: Sequence[Shape]) -> tuple[int | None, int | None] | None:
    """``(d1, d2)`` of a single 3-D output ``(B, d1, d2)`` (dynamic dims → None); None for anything else."""
    if len(shapes) != 1 or len(shapes[0]) != 3:
        return None
    d1, d2 = (d if isinstance(d, int) and d > 0 else None for d in shapes[0][1:])
    return d1, d2


def _is_rows(shapes: Sequence[Shape], info: ModelInfo, width: int) -> bool:
    """``(B, K, width)`` final detections: K rows wider than ``width``, or the model says it is end-to-end."""
    dims = _dims(shapes)
    return dims is not None and dims[1] == width and (info.end2end is True or (dims[0] or 0) > width)


def _nc(info: ModelInfo) -> int | None:
    return len(info.names) if info.names else None


def _match_detect(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    dims = _dims(shapes)
    if dims is None or dims[0] is None or dims[0] < 5 or _is_rows(shapes, info, 6) or _is_rows(shapes, info, 7):
        return False
    if info.task == "detect":
        return True
    nc = _nc(info)
    return info.task is None and (nc is None or dims[0] == 4 + nc)


def _match_obb(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    dims = _dims(shapes)
    if dims is None or dims[0] is None or dims[0] < 6 or _is_rows(shapes, info, 7):
        return False
    nc = _nc(info)
    return info.task == "obb" or (info.task is None and nc is not None and dims[0] == 5 + nc)


def _match_end2end(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return info.task in (None, "detect") and _is_rows(shapes, info, 6)


def _match_obb_end2end(shapes: Sequence[Shape], info: ModelInfo) -> bool:
    return info.task in (None, "obb") and _is_rows(shapes, info, 7)


def _channels(family: str, shapes: Sequence[Shape], info: ModelInfo, *, extra: int) -> int:
    """nc of a ``(B, 4 + nc + extra, A)`` head, checked against the model's names when it has them."""
    dims = _dims(shapes)
    if dims is None or dims[0] is None or dims[0] < 5 + extra:
        raise UnsupportedModelError(f"{family}: expected one output (B, {4 + extra} + nc, A), got {list(shapes)}")
    nc, names = dims[0] - 4 - extra, _nc(info)
    if names is not None and names != nc:
        raise UnsupportedModelError(
            f"{family}: expected {4 + extra} + {names} channels for the model's {names} names, got {dims[0]} "
            f"(output {list(shapes)}); is model-family right?"
        )
    return nc


def _build_detect(shapes: Sequence[Shape], info: ModelInfo) -> Decoder:
    return AnchorFreeDecoder(_channels("yolo", shapes, info, extra=0))


def _build_obb(shapes: Sequence[Shape], info: ModelInfo) -> Decoder:
    return ObbDecoder(_channels("yolo-obb", shapes, info, extra=1))


def _build_end2end(shapes: Sequence[Shape], info: ModelInfo) -> Decoder:
    _expect_rows("yolo-end2end", shapes, 6)
    return EndToEndDecoder(_nc(info) or 0)


def _build_obb_end2end(shapes: Sequence[Shape], info: ModelInfo) -> Decoder:
    _expect_rows("yolo-obb-end2end", shapes, 7)
    return ObbEndToEndDecoder(_nc(info) or 0)


def _expect_rows(family: str, shapes: Sequence[Shape], width: int) -> None:
    if len(shapes) < 1 or len(shapes[0]) != 3 or shapes[0][2] != width:
        raise UnsupportedModelError(f"{family}: expected an output (B, K, {width}), got {list(shapes)}")


FAMILIES: Final[dict[str, Family]] = {
    "yolo": Family(
        _match_detect, _build_detect,
        "(B, 4+nc, A): cx,cy,w,h + class scores, needs NMS (YOLOv5u/v8/v11, YOLO26 one-to-many)",
    ),
    "yolo-end2end": Family(
        _match_end2end, _build_end2end,
        "(B, K, 6): x1,y1,x2,y2,score,class (YOLO26/YOLOv10 end-to-end, export(nms=True))",
    ),
    "yolo-obb": Family(
        _match_obb, _build_obb,
        "(B, 4+nc+1, A): cx,cy,w,h + class scores + angle, needs rotated NMS (YOLOv8/11/26-OBB)",
    ),
    "yolo-obb-end2end": Family(
        _match_obb_end2end, _build_obb_end2end,
        "(B, K, 7): cx,cy,w,h,score,class,angle (YOLO26-OBB end-to-end, OBB export(nms=True))",
    ),
}  # fmt: skip


def detect_family(output_shapes: Sequence[Shape], info: ModelInfo) -> str:
    """The one family whose layout fits the model's outputs and hints (task, names, end2end).

    A raw OBB head with nc classes has the shape of a detect head with nc + 1 classes; ``info.task`` (or the
    number of ``info.names``) tells them apart.

    Args:
        output_shapes: the shape of each model output, e.g. ``[(1, 84, 8400)]``.
        info: the model file's own facts.

    Returns:
        A key of ``FAMILIES``.

    Raises:
        UnsupportedModelError: no family fits, or more than one does.
    """
    fits = [name for name, fam in FAMILIES.items() if fam.matches(output_shapes, info)]
    if len(fits) == 1:
        return fits[0]
    hints = f"task={info.task!r}, end2end={info.end2end!r}, names={len(info.names) if info.names else None}"
    if fits:
        raise UnsupportedModelError(
            f"outputs {list(output_shapes)} ({hints}) fit several families {fits}: set model-family to one of them"
        )
    known = "; ".join(f"{name} {fam.layout}" for name, fam in FAMILIES.items())
    raise UnsupportedModelError(
        f"no decoder recognises outputs {list(output_shapes)} ({hints}). Set model-family to one of: {known}; "
        "or set postprocess='package.module:function' to decode them yourself"
    )


def make_decoder(family: str, output_shapes: Sequence[Shape], info: ModelInfo) -> Decoder:
    """The decoder of a named family, checked against the model's outputs.

    Args:
        family: a key of ``FAMILIES`` (``detect_family``'s answer or the user's ``model-family``).
        output_shapes: the shape of each model output.
        info: the model file's own facts.

    Returns:
        A ``Decoder`` (it has a ``num_classes`` attribute; 0 when the layout does not tell).

    Raises:
        ConfigError: unknown family name.
        UnsupportedModelError: the outputs do not have the family's layout.
    """
    if family not in FAMILIES:
        raise ConfigError(f"model-family {family!r}: expected one of {sorted(FAMILIES)}")
    return FAMILIES[family].build(output_shapes, info)


@dataclass(frozen=True, slots=True)
class UserPostprocess:
    """A user's ``fn(outputs, params) -> list[Detections]`` as a Decoder; checks what it returns."""

    fn: Callable[[list[Tensor], DecodeParams], list[Detections]]
    spec: str
    num_classes: int = 0

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        result = self.fn(outputs, params)
        batch = outputs[0].shape[0] if outputs and outputs[0].ndim > 0 else None
        if not isinstance(result, (list, tuple)) or not all(isinstance(d, Detections) for d in result):
            got = type(result).__name__ if not isinstance(result, (list, tuple)) else [type(d).__name__ for d in result]
            raise ValueError(f"postprocess {self.spec}: expected a list of Detections, got {got}")
        if batch is not None and len(result) != batch:
            raise ValueError(f"postprocess {self.spec}: expected {batch} Detections (one per frame), got {len(result)}")
        return list(result)


def load_postprocess(spec: str) -> Decoder:
    """Import a user's post-processing function named ``"package.module:function"``.

    Args:
        spec: dotted module path, a colon, and the function's name.

    Returns:
        A Decoder calling it (results are checked: one ``Detections`` per frame).

    Raises:
        ConfigError: a malformed spec, a module that fails to import, a missing or non-callable attribute.
    """
    if not _SPEC.match(spec):
        raise ConfigError(f"postprocess {spec!r}: expected 'package.module:function'")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of the user's module is a configuration problem
        raise ConfigError(f"postprocess {spec!r}: cannot import {module_name!r}: {exc}") from exc
    fn = getattr(module, attr, None)
    if fn is None:
        raise ConfigError(f"postprocess {spec!r}: module {module_name!r} has no attribute {attr!r}")
    if not callable(fn):
        raise ConfigError(f"postprocess {spec!r}: expected a function, got {type(fn).__name__}")
    return UserPostprocess(fn, spec)
