"""runner.settings: pyinfer's property values (by name) → InferConfig and secondary settings, without GStreamer.
References: the properties' documented meaning (gst-inspect-1.0 pyinfer) and nvinfer's semantics."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferstream.errors import ConfigError
from inferstream.inference import InferConfig
from inferstream.models.base import DecodeParams, PreprocessOverride
from inferstream.runner.settings import (
    check_choices,
    infer_config,
    parse_channel_values,
    parse_classes,
    parse_labels,
    parse_size,
    secondary_settings,
)
from inferstream.secondary import ObjectFilter

# pyinfer's defaults, as gst-inspect-1.0 pyinfer lists them
DEFAULTS: dict[str, Any] = {
    "model-family": "auto", "labels": "", "postprocess": "", "confidence-threshold": 0.25, "iou-threshold": 0.45,
    "max-detections": 300, "classes": "", "input-size": "", "device": "cpu", "precision": "auto", "backend": "auto",
    "trust-checkpoint": False, "graph": "auto", "preprocess": "auto", "resize": "auto", "pad-value": -1, "mean": "",
    "std": "", "channel-order": "auto", "process-mode": "primary", "operate-on-unique-id": -1,
    "operate-on-classes": "", "min-object-size": "", "reinfer-interval": 0, "classifier-type": "", "unique-id": 1,
}


def test_parse_size_reads_n_and_width_x_height_as_height_width() -> None:
    assert parse_size("640") == (640, 640)
    assert parse_size("640x384") == (384, 640)
    assert parse_size("") is None and parse_size("auto-rect") is None and parse_size("AUTO-RECT") is None


@pytest.mark.parametrize(("text", "match"), [("big", "expected N or WIDTHxHEIGHT"), ("16", "within 32..8192"),
                                             ("640x9000", "within 32..8192")])
def test_parse_size_rejects_malformed_and_out_of_range_sizes(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_size(text)


def test_parse_labels_reads_a_file_or_a_comma_list(tmp_path: Path) -> None:
    path = tmp_path / "labels.txt"
    path.write_text("person\n\n bicycle \ncar\n")
    assert parse_labels(str(path)) == ("person", "bicycle", "car")  # blank lines dropped, names stripped
    assert parse_labels("a, b,c") == ("a", "b", "c")
    assert parse_labels("") is None
    assert parse_labels("solo") == ("solo",)


def test_parse_labels_names_a_missing_file_and_takes_a_list_too_long_for_a_file_name() -> None:
    with pytest.raises(ConfigError, match="labels file 'no/such.txt' not found"):
        parse_labels("no/such.txt")
    many = ",".join(f"label{i}" for i in range(400))  # longer than NAME_MAX: is_file() raises ENAMETOOLONG
    assert parse_labels(many) == tuple(f"label{i}" for i in range(400))
    with pytest.raises(ConfigError, match="labels 'xxxx"):
        parse_labels("x" * 5000)  # too long for a name and no comma: not a list either


def test_parse_classes_and_channel_values() -> None:
    assert parse_classes("0, 2;7") == (0, 2, 7) and parse_classes("") is None
    with pytest.raises(ConfigError, match="expected class ids"):
        parse_classes("person")
    assert parse_channel_values("0.485,0.456,0.406", "mean") == (0.485, 0.456, 0.406)
    assert parse_channel_values("0.5", "mean") == (0.5, 0.5, 0.5) and parse_channel_values(" ", "mean") is None
    with pytest.raises(ConfigError, match="three numbers .one per channel. or one, got 2"):
        parse_channel_values("0.1,0.2", "mean")
    with pytest.raises(ConfigError, match="expected three numbers separated by commas"):
        parse_channel_values("a,b,c", "std")
    with pytest.raises(ConfigError, match="every value must be > 0"):
        parse_channel_values("0.2,0,0.2", "std", positive=True)


def test_infer_config_of_the_defaults_is_the_default_config() -> None:
    assert infer_config(DEFAULTS, "m.onnx") == InferConfig(model="m.onnx")


def test_infer_config_carries_every_setting() -> None:
    values = DEFAULTS | {"model-family": "yolo", "labels": "a,b", "confidence-threshold": 0.5, "classes": "1",
                         "input-size": "auto-rect", "device": "cuda:1", "precision": "fp16", "graph": "off",
                         "preprocess": "exact", "resize": "stretch", "pad-value": 0, "mean": "0.5",
                         "std": "0.25", "channel-order": "bgr", "process-mode": "secondary"}
    cfg = infer_config(values, "m.pt", class_conf=((1, 0.7),))
    assert cfg.params == DecodeParams(conf=0.5, iou=0.45, max_det=300, classes=(1,), class_conf=((1, 0.7),))
    assert (cfg.family, cfg.labels, cfg.input_size, cfg.rect, cfg.device) == ("yolo", ("a", "b"), None, True, "cuda:1")
    assert (cfg.precision, cfg.graph, cfg.preprocess, cfg.objects) == ("fp16", "off", "exact", True)
    assert cfg.transform == PreprocessOverride(resize="stretch", pad_value=0, mean=(0.5,) * 3, std=(0.25,) * 3,
                                               bgr=True)


@pytest.mark.parametrize("name", ["model-family", "precision", "backend", "graph", "preprocess", "resize",
                                  "channel-order", "process-mode"])
def test_a_choice_out_of_its_choices_names_the_property_and_the_choices(name: str) -> None:
    with pytest.raises(ConfigError, match=rf"{name}='bogus': expected one of \['"):
        check_choices(DEFAULTS | {name: "bogus"})


def test_infer_config_needs_a_model() -> None:
    with pytest.raises(ConfigError, match="the model property is not set"):
        infer_config(DEFAULTS, "")


def test_secondary_settings_read_nvinfers_object_selection() -> None:
    s = secondary_settings(DEFAULTS | {"operate-on-unique-id": 3, "operate-on-classes": "car, bus",
                                       "min-object-size": "32x64", "reinfer-interval": 5, "unique-id": 7})
    assert s.filter == ObjectFilter(3, frozenset({"car", "bus"}), (32, 64))
    assert (s.reinfer_interval, s.unique_id, s.classifier_type) == (5, 7, "classifier7")  # nvinfer's default name
    assert secondary_settings(DEFAULTS | {"classifier-type": "color"}).classifier_type == "color"
    with pytest.raises(ConfigError, match="min-object-size"):
        secondary_settings(DEFAULTS | {"min-object-size": "3xa"})
