"""pyinfer's settings as the runner takes them: property values (by property name) in, an ``InferConfig`` and the
secondary mode's settings out. No GStreamer here (R6, R7): the element reads its properties once, in do_start, and
hands them over as a plain mapping, so every rule below is tested without a pipeline."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from inferstream.errors import ConfigError

if TYPE_CHECKING:
    from inferstream.inference import InferConfig
    from inferstream.models.base import PreprocessOverride
    from inferstream.secondary import ObjectFilter

AUTO_RECT: Final = "auto-rect"
PROCESS_MODES: Final = ("primary", "secondary")
RESIZE_MODES: Final = ("auto", "letterbox", "stretch")
CHANNEL_ORDERS: Final = ("auto", "rgb", "bgr")


def family_choices() -> tuple[str, ...]:
    """``model-family``'s values: auto, then every registered family."""
    from inferstream.models.registry import FAMILIES

    return ("auto", *FAMILIES)


def choice_table() -> dict[str, tuple[str, ...]]:
    """Every choice property of pyinfer and its allowed values."""
    from inferstream.backends.loader import BACKEND_CHOICES, GRAPH_MODES, PRECISIONS
    from inferstream.inference import PREPROCESS_MODES

    return {"model-family": family_choices(), "precision": PRECISIONS, "backend": BACKEND_CHOICES,
            "graph": GRAPH_MODES, "preprocess": PREPROCESS_MODES, "resize": RESIZE_MODES,
            "channel-order": CHANNEL_ORDERS, "process-mode": PROCESS_MODES}


def parse_size(text: str) -> tuple[int, int] | None:
    """'640' → (640, 640); '640x384' (width x height) → (384, 640); '' or 'auto-rect' → None (from the model)."""
    if not text or text.strip().lower() == AUTO_RECT:
        return None
    try:
        w, _, h = text.lower().partition("x")
        size = (int(h or w), int(w))
    except ValueError:
        raise ConfigError(f"input-size {text!r}: expected N or WIDTHxHEIGHT, e.g. 640 or 640x384") from None
    if min(size) < 32 or max(size) > 8192:
        raise ConfigError(f"input-size {text!r}: each side must be within 32..8192")
    return size


def parse_labels(text: str) -> tuple[str, ...] | None:
    """Labels from a file (one per line) or a comma-separated list; empty → None. A comma list too long to be a
    file name is a list, not an OSError."""
    if not text:
        return None
    try:
        path = Path(text)
        if path.is_file():
            names = [line.strip() for line in path.read_text().splitlines()]
            return tuple(n for n in names if n)
    except OSError as exc:  # ENAMETOOLONG and the like: the text cannot name a file
        if "," not in text:
            raise ConfigError(f"labels {text[:60]!r}...: {exc.strerror or exc}") from None
    if "," not in text and ("/" in text or text.endswith(".txt")):
        raise ConfigError(f"labels file {text!r} not found (or give a comma-separated list)")
    return tuple(n.strip() for n in text.split(","))


def parse_classes(text: str) -> tuple[int, ...] | None:
    """'0,2,7' → (0, 2, 7); empty → None (every class)."""
    if not text:
        return None
    try:
        return tuple(int(c) for c in text.replace(";", ",").split(",") if c.strip())
    except ValueError:
        raise ConfigError(f"classes {text!r}: expected class ids separated by commas, e.g. 0,2,7") from None


def parse_channel_values(text: str, name: str, positive: bool = False) -> tuple[float, float, float] | None:
    """Three per-channel values ('0.485,0.456,0.406', in [0, 1] units), or one for all three; empty → None.
    ``positive``: every value must be > 0 (a divisor such as std)."""
    if not text.strip():
        return None
    try:
        values = tuple(float(v) for v in text.replace(";", ",").split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{name} {text!r}: expected three numbers separated by commas, e.g. 0.485,0.456,0.406") \
            from None
    if len(values) == 1:
        values *= 3
    if len(values) != 3:
        raise ConfigError(f"{name} {text!r}: expected three numbers (one per channel) or one, got {len(values)}")
    if positive and min(values) <= 0:
        raise ConfigError(f"{name} {text!r}: every value must be > 0")
    return (values[0], values[1], values[2])


def check_choices(values: Mapping[str, Any]) -> None:
    """Raises ConfigError naming the first choice property whose value is not one of its choices."""
    for name, choices in choice_table().items():
        if values[name] not in choices:
            raise ConfigError(f"{name}={values[name]!r}: expected one of {list(choices)}")


def infer_config(values: Mapping[str, Any], model: str,
                 class_conf: tuple[tuple[int, float], ...] = ()) -> InferConfig:
    """The InferConfig pyinfer's properties ask for, with ``model`` as the model (a hot swap's new one).

    Args:
        values: pyinfer's property values by property name (``model-family``, ``input-size``, ...).
        model: the model to load.
        class_conf: per-class thresholds from the config file (``DecodeParams.class_conf``).

    Raises:
        ConfigError: a value out of its choices, a malformed one, or no model.
    """
    from inferstream.inference import InferConfig
    from inferstream.models.base import DecodeParams

    check_choices(values)
    if not model:
        raise ConfigError("the model property is not set")
    params = DecodeParams(conf=values["confidence-threshold"], iou=values["iou-threshold"],
                          max_det=values["max-detections"], classes=parse_classes(values["classes"]),
                          class_conf=class_conf)
    size = values["input-size"]
    return InferConfig(model=model, family=values["model-family"], labels=parse_labels(values["labels"]),
                       params=params, input_size=parse_size(size),
                       rect=True if size.strip().lower() == AUTO_RECT else None,
                       device=values["device"], precision=values["precision"], backend=values["backend"],
                       trust_checkpoint=values["trust-checkpoint"], postprocess=values["postprocess"] or None,
                       graph=values["graph"], preprocess=values["preprocess"], transform=preprocess_override(values),
                       objects=values["process-mode"] == "secondary")


def preprocess_override(values: Mapping[str, Any]) -> PreprocessOverride:
    """The user's changes to the model family's preprocessing (``resize``, ``pad-value``, ``mean``, ``std``,
    ``channel-order``; auto / -1 / empty keep the family's)."""
    from inferstream.models.base import PreprocessOverride

    order = values["channel-order"]
    return PreprocessOverride(resize=None if values["resize"] == "auto" else values["resize"],
                              pad_value=None if values["pad-value"] < 0 else values["pad-value"],
                              mean=parse_channel_values(values["mean"], "mean"),
                              std=parse_channel_values(values["std"], "std", positive=True),
                              bgr=None if order == "auto" else order == "bgr")


@dataclass(frozen=True, slots=True)
class SecondarySettings:
    """A secondary pyinfer's object selection, reinfer interval and producer record (nvinfer's operate-on-gie-id,
    operate-on-class-ids, input-object-min-width/height, secondary-reinfer-interval, classifier-type)."""

    filter: ObjectFilter
    reinfer_interval: int
    unique_id: int
    classifier_type: str  # the attribute name in DeepStream payloads


def secondary_settings(values: Mapping[str, Any]) -> SecondarySettings:
    """Raises ConfigError: a malformed ``min-object-size``."""
    from inferstream.secondary import parse_filter

    flt = parse_filter(values["operate-on-unique-id"], values["operate-on-classes"], values["min-object-size"])
    kind = values["classifier-type"] or f"classifier{values['unique-id']}"
    return SecondarySettings(flt, values["reinfer-interval"], values["unique-id"], kind)
