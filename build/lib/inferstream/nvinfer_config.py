"""nvinfer configuration files (INI ``config_infer_*.txt`` or YAML ``.yml``) mapped onto pyinfer's properties.

DeepStream users arrive with these files. This module reads one and says, in pyinfer's own terms, which properties
it sets, which per-class thresholds it gives, and which keys it ignores (no GStreamer here: pyinfer applies it).

Only keys present in the file are mapped; an absent key keeps pyinfer's default (the model family's
preprocessing), not nvinfer's. The mappings (nvinfer computes ``y = net-scale-factor * (x - offset)`` on 0..255
levels, we ``(x / 255 - mean) / std``):

- ``onnx-file`` → ``model`` (relative paths are relative to the file, as nvinfer resolves them); a
  ``model-engine-file`` or ``custom-network-config`` alone is refused: TensorRT engines and Darknet files do not
  run here, their ONNX does.
- ``labelfile-path`` → ``labels``; ``infer-dims`` (C;H;W) → ``input-size``.
- ``offsets`` → ``mean = offset / 255``; ``net-scale-factor`` → ``std = 1 / (255 * net-scale-factor)``.
- ``model-color-format`` 0/1 → ``channel-order`` rgb/bgr (2, grey, is refused).
- ``maintain-aspect-ratio`` 1/0 → ``resize`` letterbox/stretch; letterboxing pads with black, as nvinfer does
  (``pad-value=0``), and always symmetrically (``symmetric-padding=0`` gets a note).
- ``network-mode`` 0/2 → ``precision`` fp32/fp16 for a model set on the element (ignored with ``onnx-file``: an
  ONNX file's precision is fixed by the file; 1, INT8, is always ignored); ``batch-size``, ``interval``,
  ``gie-unique-id`` → ``batch-size``, ``interval``, ``unique-id``.
- ``[class-attrs-all]`` ``pre-cluster-threshold``/``nms-iou-threshold``/``topk`` → ``confidence-threshold``/
  ``iou-threshold``/``max-detections``; ``[class-attrs-N]`` ``pre-cluster-threshold`` → a per-class threshold;
  ``filter-out-class-ids`` → threshold 1.0 for those classes (never kept).
- ``cluster-mode=2`` (NMS), ``network-type=0`` (detector) and ``process-mode=1`` (primary) are what pyinfer does;
  ``gpu-id`` is listed as ignored (pyinfer's ``device`` picks the GPU).
"""
from __future__ import annotations

import configparser
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from inferstream.errors import ConfigError

# what pyinfer does anyway: these values are accepted silently; any other value of the key is ignored (listed)
_NATIVE: Final = {"cluster-mode": "2", "network-type": "0", "process-mode": "1"}
_LISTED_WITH_VALUE: Final = frozenset({*_NATIVE, "network-mode", "gpu-id"})  # gpu-id: pyinfer's device chooses
_CLASS_ALL: Final = {"pre-cluster-threshold": "confidence-threshold", "nms-iou-threshold": "iou-threshold",
                     "topk": "max-detections"}


@dataclass(frozen=True, slots=True)
class NvinferSettings:
    """What one nvinfer config file means for pyinfer.

    Attributes:
        properties: pyinfer property name → value (already in the property's type).
        class_conf: ``(class id, threshold)`` pairs for ``DecodeParams.class_conf``.
        ignored: the keys (``section.key`` or ``section.key=value``) that have no meaning here.
        notes: other differences worth a warning (e.g. symmetric padding).
    """

    properties: dict[str, Any]
    class_conf: tuple[tuple[int, float], ...]
    ignored: tuple[str, ...]
    notes: tuple[str, ...]


def read_nvinfer_config(path: str | Path) -> NvinferSettings:
    """Read an nvinfer INI or YAML config file.

    Raises:
        ConfigError: unreadable file, a bad value, or a setting that cannot work here (TensorRT engine only,
            grey input), with the file and key in the message.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config-file {str(path)!r}: {exc.strerror or exc}") from None
    sections = _yaml_sections(text, path) if path.suffix in (".yml", ".yaml") else _ini_sections(text, path)
    return _Mapper(path, sections).run()


def _ini_sections(text: str, path: Path) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#",), strict=False)
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as exc:
        raise ConfigError(f"config-file {str(path)!r}: {exc.message.splitlines()[0]}") from None
    return {name: dict(parser[name]) for name in parser.sections()}


def _yaml_sections(text: str, path: Path) -> dict[str, dict[str, str]]:
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config-file {str(path)!r}: not valid YAML ({exc})") from None
    if not isinstance(data, Mapping) or not all(isinstance(v, Mapping) for v in data.values()):
        raise ConfigError(f"config-file {str(path)!r}: expected sections (property:, class-attrs-all:, ...) of keys")
    return {str(name): {str(k): _yaml_text(v) for k, v in body.items()} for name, body in data.items()}


def _yaml_text(value: object) -> str:
    """A YAML value as the INI form would spell it (lists as ``a;b``, booleans as 1/0)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) for v in value)
    return str(value)


class _Mapper:
    """One file's sections → NvinferSettings (collects ignored keys as it goes)."""

    def __init__(self, path: Path, sections: dict[str, dict[str, str]]) -> None:
        self.path, self.sections = path, sections
        self.props: dict[str, Any] = {}
        self.ignored: list[str] = []
        self.notes: list[str] = []

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"config-file {str(self.path)!r}: {key}: {message}")

    def run(self) -> NvinferSettings:
        prop = dict(self.sections.get("property", {}))
        if "property" not in self.sections:
            raise self.fail("[property]", "section missing (is this an nvinfer config file?)")
        self._model(prop)
        self._preprocess(prop)
        self._simple(prop)
        excluded = self._classes(prop.pop("filter-out-class-ids", None))
        for key, value in prop.items():
            if _NATIVE.get(key) == value:
                continue
            self.ignored.append(f"{key}={value}" if key in _LISTED_WITH_VALUE else key)
        class_conf = self._class_attrs() + tuple((c, 1.0) for c in excluded)
        for name in self.sections:
            if name != "property" and not name.startswith("class-attrs-"):
                self.ignored.append(f"[{name}]")
        return NvinferSettings(self.props, tuple(dict(class_conf).items()), tuple(self.ignored), tuple(self.notes))

    def _file(self, value: str) -> str:
        p = Path(value)
        return str(p if p.is_absolute() else self.path.parent / p)

    def _model(self, prop: dict[str, str]) -> None:
        onnx = prop.pop("onnx-file", None)
        if onnx:
            self.props["model"] = self._file(onnx)
            return
        for key, what in (("model-engine-file", "a TensorRT engine"), ("custom-network-config", "a Darknet network"),
                          ("model-file", "a Caffe/Darknet model")):
            if prop.get(key):
                raise self.fail(key, f"{prop[key]!r} is {what}, which inferstream cannot run: set onnx-file to the "
                                     "ONNX model it was built from")

    def _preprocess(self, prop: dict[str, str]) -> None:
        number = self._number
        if "net-scale-factor" in prop:
            scale = number("net-scale-factor", prop.pop("net-scale-factor"), float, lo=1e-9)
            self.props["std"] = ",".join([_short(1.0 / (255.0 * scale))] * 3)
        if "offsets" in prop:
            text = prop.pop("offsets")
            levels = [number("offsets", v, float, lo=0.0, hi=255.0) for v in text.replace(",", ";").split(";") if v]
            if len(levels) != 3:
                raise self.fail("offsets", f"{text!r}: expected three levels (0..255) separated by ';'")
            self.props["mean"] = ",".join(_short(v / 255.0) for v in levels)
        if "model-color-format" in prop:
            fmt = number("model-color-format", prop.pop("model-color-format"), int, lo=0, hi=2)
            if fmt == 2:
                raise self.fail("model-color-format", "2 (grey) is not supported: inferstream feeds RGB or BGR")
            self.props["channel-order"] = "bgr" if fmt == 1 else "rgb"
        symmetric = prop.pop("symmetric-padding", None)
        if "maintain-aspect-ratio" in prop:
            keep = number("maintain-aspect-ratio", prop.pop("maintain-aspect-ratio"), int, lo=0, hi=1)
            self.props["resize"] = "letterbox" if keep else "stretch"
            if keep:
                self.props["pad-value"] = 0
                if symmetric is None or number("symmetric-padding", symmetric, int, lo=0, hi=1) == 0:
                    self.notes.append("symmetric-padding=0 (pad right and bottom) is not supported: the letterbox "
                                      "pads symmetrically; boxes of a model trained the other way shift slightly")
        if "infer-dims" in prop:
            text = prop.pop("infer-dims")
            dims = [number("infer-dims", v, int, lo=1, hi=8192) for v in text.replace(",", ";").split(";") if v]
            if len(dims) != 3:
                raise self.fail("infer-dims", f"{text!r}: expected C;H;W")
            self.props["input-size"] = f"{dims[2]}x{dims[1]}"

    def _simple(self, prop: dict[str, str]) -> None:
        if "labelfile-path" in prop:
            self.props["labels"] = self._file(prop.pop("labelfile-path"))
        if "network-mode" in prop:  # TensorRT's build precision; an ONNX file's precision is the file's own
            mode = self._number("network-mode", prop["network-mode"], int, lo=0, hi=3)
            if mode in (0, 2) and "model" not in self.props:
                self.props["precision"] = "fp32" if mode == 0 else "fp16"
                del prop["network-mode"]
        for key, name, lo in (("batch-size", "batch-size", 1), ("interval", "interval", 0),
                              ("gie-unique-id", "unique-id", 0)):
            if key in prop:
                self.props[name] = self._number(key, prop.pop(key), int, lo=lo)

    def _classes(self, text: str | None) -> list[int]:
        if not text:
            return []
        return [self._number("filter-out-class-ids", v, int, lo=0) for v in text.replace(",", ";").split(";") if v]

    def _class_attrs(self) -> tuple[tuple[int, float], ...]:
        for key, value in self.sections.get("class-attrs-all", {}).items():
            name = _CLASS_ALL.get(key)
            if name is None:
                self.ignored.append(f"[class-attrs-all] {key}")
                continue
            if key == "topk":
                self.props[name] = self._number(key, value, int, lo=1)
            else:
                self.props[name] = self._number(key, value, float, lo=0.0, hi=1.0)
        per_class = []
        for section, body in self.sections.items():
            suffix = section.removeprefix("class-attrs-")
            if suffix == section or suffix == "all":
                continue
            class_id = self._number(f"[{section}]", suffix, int, lo=0)
            for key, value in body.items():
                if key == "pre-cluster-threshold":
                    per_class.append((class_id, float(self._number(key, value, float, lo=0.0, hi=1.0))))
                else:
                    self.ignored.append(f"[{section}] {key}")
        return tuple(per_class)

    def _number(self, key: str, text: str, kind: Callable[[str], Any], lo: float | None = None,
                hi: float | None = None) -> Any:
        try:
            value = kind(text.strip())
        except ValueError:
            raise self.fail(key, f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.fail(key, f"{text!r} is out of range {lo}..{'' if hi is None else hi}")
        return value


def _short(value: float) -> str:
    """A float for a mean/std property, rounded so that float32 ``1/255`` gives exactly 1."""
    return f"{round(value, 6):g}"
