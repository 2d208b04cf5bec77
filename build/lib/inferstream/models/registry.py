"""Which model family a model belongs to: the one table, auto-detection from output layouts, user post-processing.

Extension points:

- A new built-in family is one file in ``models/`` that defines ``FAMILIES``, a tuple of ``models.base.Family``
  (how to recognise its outputs, build its decoder, preprocess its input, and what it yields), plus its name in
  ``_FAMILY_MODULES``. Auto detection tries every family and needs exactly one to match; ``model-family=<name>``
  skips detection. pyinfer's ``model-family`` choices and its ``gst-inspect-1.0`` text come from this table.
- A user's own post-processing needs no change here: ``postprocess="package.module:function"`` names a function
  ``fn(outputs: list[Tensor], params: DecodeParams) -> list[Detections]`` (one Detections per frame, boxes in
  model-input pixels); ``load_postprocess`` imports it and wraps it as a ``Decoder``.

Nothing here imports torch: pyinfer reads the table when gst-python scans the plugins.
"""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from inferstream.errors import ConfigError, UnsupportedModelError

if TYPE_CHECKING:
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.detections import Detections
    from inferstream.models.base import DecodeParams, Decoder, Family, Shape

_SPEC: Final = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
_FAMILY_MODULES: Final = ("yolo", "yolo_tasks", "detr", "classifier")


def _collect() -> dict[str, Family]:
    table: dict[str, Family] = {}
    for module in _FAMILY_MODULES:
        for family in importlib.import_module(f"inferstream.models.{module}").FAMILIES:
            if family.name in table or family.name in ("auto", "custom"):
                raise RuntimeError(f"model family {family.name!r} is defined twice (or is a reserved name)")
            table[family.name] = family
    return table


FAMILIES: Final[dict[str, Family]] = _collect()
"""Every built-in family by name, in detection order."""


def family_layouts() -> str:
    """One line per family: its name, its output layout and preprocessing (for errors and documentation)."""
    return "; ".join(f"{name} {fam.layout}" for name, fam in FAMILIES.items())


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
    raise UnsupportedModelError(
        f"no decoder recognises outputs {list(output_shapes)} ({hints}). Set model-family to one of: "
        f"{family_layouts()}; or set postprocess='package.module:function' (fn(outputs, params) -> "
        "list[Detections], boxes in model-input pixels) to decode them yourself"
    )


def make_decoder(family: str, output_shapes: Sequence[Shape], info: ModelInfo,
                 input_hw: tuple[int, int] = (640, 640)) -> Decoder:
    """The decoder of a named family, checked against the model's outputs.

    Args:
        family: a key of ``FAMILIES`` (``detect_family``'s answer or the user's ``model-family``).
        output_shapes: the shape of each model output.
        info: the model file's own facts.
        input_hw: (height, width) the model runs at.

    Returns:
        A ``Decoder`` (it has a ``num_classes`` attribute; 0 when the layout does not tell).

    Raises:
        ConfigError: unknown family name.
        UnsupportedModelError: the outputs do not have the family's layout.
    """
    if family not in FAMILIES:
        raise ConfigError(f"model-family {family!r}: expected one of {sorted(FAMILIES)}")
    return FAMILIES[family].build(output_shapes, info, input_hw)


@dataclass(frozen=True, slots=True)
class UserPostprocess:
    """A user's ``fn(outputs, params) -> list[Detections]`` as a Decoder; checks what it returns."""

    fn: Callable[[list[Tensor], DecodeParams], list[Detections]]
    spec: str
    num_classes: int = 0

    def __call__(self, outputs: list[Tensor], params: DecodeParams) -> list[Detections]:
        from inferstream.detections import Detections

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
