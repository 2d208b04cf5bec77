"""nvinfer config files (INI and YAML) → pyinfer properties: each mapping against nvinfer's own formula, the
ignored keys named, and the settings that cannot work here refused with the key in the message."""
from __future__ import annotations

from pathlib import Path

import pytest

from inferstream.errors import ConfigError
from inferstream.nvinfer_config import read_nvinfer_config

INI = """\
[property]
gpu-id=0
net-scale-factor=0.0173520735727919486
offsets=123.675;116.28;103.53
model-color-format=1
onnx-file=models/yolo.onnx
model-engine-file=model_b4_gpu0_fp16.engine
labelfile-path=/opt/labels.txt
infer-dims=3;384;640
batch-size=4
network-mode=2
interval=2
gie-unique-id=3
process-mode=1
network-type=0
cluster-mode=2
maintain-aspect-ratio=1
symmetric-padding=1
filter-out-class-ids=7;9
parse-bbox-func-name=NvDsInferParseYolo
custom-lib-path=libnvdsinfer_custom_impl_Yolo.so  # a comment
operate-on-gie-id=1

[class-attrs-all]
pre-cluster-threshold=0.3
nms-iou-threshold=0.5
topk=100
detected-min-w=8

[class-attrs-2]
pre-cluster-threshold=0.6
nms-iou-threshold=0.2
"""

YAML = """\
property:
  net-scale-factor: 0.0039215697906911373
  model-color-format: 0
  onnx-file: yolo.onnx
  maintain-aspect-ratio: 0
  cluster-mode: 4
  process-mode: 2
class-attrs-all:
  pre-cluster-threshold: 0.25
class-attrs-0:
  pre-cluster-threshold: 0.5
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_ini_maps_onto_pyinfer_properties(tmp_path: Path) -> None:
    s = read_nvinfer_config(_write(tmp_path, "config_infer_primary.txt", INI))
    mean = [float(v) for v in s.properties.pop("mean").split(",")]
    std = [float(v) for v in s.properties.pop("std").split(",")]
    # nvinfer: y = k * (x - offset) on levels; ours: (x / 255 - mean) / std; same y for any level x
    for x in (0.0, 77.0, 255.0):
        for offset, m, sd in zip((123.675, 116.28, 103.53), mean, std, strict=True):
            assert (x / 255 - m) / sd == pytest.approx(0.0173520735727919486 * (x - offset), rel=1e-5, abs=1e-5)
    assert s.properties == {"model": str(tmp_path / "models/yolo.onnx"), "labels": "/opt/labels.txt",
                            "channel-order": "bgr", "resize": "letterbox", "pad-value": 0, "input-size": "640x384",
                            "batch-size": 4, "interval": 2, "unique-id": 3, "confidence-threshold": 0.3,
                            "iou-threshold": 0.5, "max-detections": 100}
    assert s.class_conf == ((2, 0.6), (7, 1.0), (9, 1.0))
    assert set(s.ignored) == {"gpu-id=0", "model-engine-file", "network-mode=2", "parse-bbox-func-name", "custom-lib-path",
                              "operate-on-gie-id", "[class-attrs-all] detected-min-w",
                              "[class-attrs-2] nms-iou-threshold"}
    assert s.notes == ()


def test_yaml_maps_like_ini_and_names_secondary_mode_and_cluster_mode(tmp_path: Path) -> None:
    s = read_nvinfer_config(_write(tmp_path, "config_infer_primary.yml", YAML))
    assert s.properties == {"model": str(tmp_path / "yolo.onnx"), "std": "1,1,1", "channel-order": "rgb",
                            "resize": "stretch", "confidence-threshold": 0.25}
    assert s.class_conf == ((0, 0.5),)
    assert set(s.ignored) == {"cluster-mode=4", "process-mode=2"}


def test_letterbox_without_symmetric_padding_gets_a_note(tmp_path: Path) -> None:
    s = read_nvinfer_config(_write(tmp_path, "c.txt", "[property]\nonnx-file=a.onnx\nmaintain-aspect-ratio=1\n"))
    assert s.properties["resize"] == "letterbox"
    assert len(s.notes) == 1 and "symmetric-padding=0" in s.notes[0]


@pytest.mark.parametrize(("body", "match"), [
    ("model-engine-file=yolo.engine", r"model-engine-file: 'yolo.engine' is a TensorRT engine.*set onnx-file"),
    ("custom-network-config=yolov4.cfg", r"custom-network-config: .*Darknet"),
    ("onnx-file=a.onnx\nmodel-color-format=2", r"model-color-format: 2 \(grey\) is not supported"),
    ("onnx-file=a.onnx\nnet-scale-factor=abc", r"net-scale-factor: 'abc' is not a number"),
    ("onnx-file=a.onnx\noffsets=1;2", r"offsets: '1;2': expected three levels"),
    ("onnx-file=a.onnx\nbatch-size=0", r"batch-size: '0' is out of range"),
])
def test_unusable_settings_are_refused_with_the_key(tmp_path: Path, body: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        read_nvinfer_config(_write(tmp_path, "c.txt", f"[property]\n{body}\n"))


def test_unreadable_and_malformed_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config-file '.*missing.txt': No such file"):
        read_nvinfer_config(tmp_path / "missing.txt")
    with pytest.raises(ConfigError, match=r"\[property\]: section missing"):
        read_nvinfer_config(_write(tmp_path, "c.txt", "[class-attrs-all]\ntopk=3\n"))
    with pytest.raises(ConfigError, match="expected sections"):
        read_nvinfer_config(_write(tmp_path, "c.yml", "- a\n- b\n"))
    with pytest.raises(ConfigError, match="config-file"):
        read_nvinfer_config(_write(tmp_path, "d.txt", "onnx-file=a.onnx\n"))
