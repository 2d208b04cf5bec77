"""pyinfer config-file=: NVIDIA-style nvinfer configs for YOLO (written here in the style of DeepStream-Yolo's
config_infer_primary_yoloV8.txt and of yolo_deepstream's config_infer_primary_yoloV7, as YAML) give the same boxes
on vtest frames as the same settings given as properties, and the ignored keys come in one warning."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gst_helpers import run_pipeline

from inferstream.meta.gstanalytics import read_detections

DEEPSTREAM_YOLO = """\
[property]
gpu-id=0
net-scale-factor=0.0039215697906911373
model-color-format=0
onnx-file={onnx}
model-engine-file=model_b1_gpu0_fp32.engine
#int8-calib-file=calib.table
labelfile-path=labels.txt
batch-size=1
network-mode=0
num-detected-classes=2
interval=0
gie-unique-id=1
process-mode=1
network-type=0
cluster-mode=2
maintain-aspect-ratio=1
symmetric-padding=1
#workspace-size=2000
parse-bbox-func-name=NvDsInferParseYolo
custom-lib-path=nvdsinfer_custom_impl_Yolo/libnvdsinfer_custom_impl_Yolo.so
engine-create-func-name=NvDsInferYoloCudaEngineGet

[class-attrs-all]
nms-iou-threshold=0.45
pre-cluster-threshold=0.25
topk=300
"""
DEEPSTREAM_YOLO_PROPS = ("labels={dir}/labels.txt resize=letterbox pad-value=0 std=1,1,1 channel-order=rgb "
                         "confidence-threshold=0.25 iou-threshold=0.45 max-detections=300 batch-size=1 unique-id=1")

YOLO_DEEPSTREAM_YAML = """\
property:
  gpu-id: 0
  net-scale-factor: 0.0039215697906911373
  model-color-format: 0
  onnx-file: {onnx}
  labelfile-path: labels.txt
  batch-size: 1
  network-mode: 2
  num-detected-classes: 2
  interval: 1
  gie-unique-id: 2
  process-mode: 1
  network-type: 0
  cluster-mode: 2
  maintain-aspect-ratio: 1
  parse-bbox-func-name: NvDsInferParseCustomYoloV7_cuda
  custom-lib-path: nvdsinfer_custom_impl_Yolo/libnvdsinfer_custom_impl_Yolo.so
class-attrs-all:
  nms-iou-threshold: 0.6
  pre-cluster-threshold: 0.2
class-attrs-0:
  pre-cluster-threshold: 0.45
"""
# class-attrs-0 has no property: the reference decodes at class-attrs-all's 0.2 and drops class 0's rows at or below
# 0.45 afterwards (NMS runs per class, so one class's threshold cannot change another's boxes)
YOLO_DEEPSTREAM_PROPS = ("labels={dir}/labels.txt resize=letterbox pad-value=0 std=1,1,1 channel-order=rgb "
                         "confidence-threshold=0.2 iou-threshold=0.6 interval=1 unique-id=2")
FRAMES = 6


def _rows(buf: object) -> tuple[list[str], np.ndarray]:
    meta = read_detections(buf)  # type: ignore[arg-type]
    if meta is None:
        return [], np.zeros((0, 5))
    names = [meta.label_names[i] for i in meta.dets.labels.tolist()]
    return names, np.concatenate([meta.dets.boxes_xyxy.numpy(), meta.dets.scores.numpy()[:, None]], axis=1)


def _compare(vtest: Path, config_branch: str, props_branch: str) -> tuple[list, list, list[str]]:
    desc = (f"filesrc location={vtest} ! decodebin ! identity eos-after={FRAMES + 1} ! videoconvert "
            f"! video/x-raw,format=RGB ! tee name=t "
            f"t. ! queue ! pyinfer name=file {config_branch} ! fakesink "
            f"t. ! queue ! pyinfer name=props {props_branch} ! fakesink")
    result = run_pipeline(desc, {"file": _rows, "props": _rows}, timeout_s=180)
    assert not result.errors, result.errors
    return result.seen["file"], result.seen["props"], result.warnings


def _above(rows: tuple[list[str], np.ndarray], label: str, threshold: float) -> tuple[list[str], np.ndarray]:
    """The rows of ``rows`` without ``label``'s detections scoring at or below ``threshold``."""
    names, values = rows
    keep = [n != label or v[4] > threshold for n, v in zip(names, values, strict=True)]
    return [n for n, k in zip(names, keep, strict=True) if k], values[np.array(keep, dtype=bool)].reshape(-1, 5)


@pytest.mark.parametrize(("name", "text", "props", "explicit", "class0_conf"), [
    ("config_infer_primary_yoloV8.txt", DEEPSTREAM_YOLO, DEEPSTREAM_YOLO_PROPS, "", 0.0),
    ("config_infer_primary_yoloV7.yml", YOLO_DEEPSTREAM_YAML, YOLO_DEEPSTREAM_PROPS, "", 0.45),
    # a property set on the element wins over the file, as in nvinfer
    ("config_infer_primary_yoloV8.txt", DEEPSTREAM_YOLO,
     DEEPSTREAM_YOLO_PROPS.replace("confidence-threshold=0.25", "confidence-threshold=0.55"),
     "confidence-threshold=0.55", 0.0),
])
def test_pyinfer_config_file_gives_the_boxes_of_the_same_properties(
        tmp_path: Path, vtest: Path, person_onnx: Path, name: str, text: str, props: str, explicit: str,
        class0_conf: float) -> None:
    (tmp_path / "labels.txt").write_text("Normal\nFall\n")  # the model's own names (embedded names win anyway)
    config = tmp_path / name
    config.write_text(text.format(onnx=person_onnx))
    from_file, from_props, warnings = _compare(vtest, f"config-file={config} {explicit}",
                                               f"model={person_onnx} {props.format(dir=tmp_path)}")
    assert len(from_file) == len(from_props) == FRAMES
    dropped = 0
    for (names_f, rows_f), props_rows in zip(from_file, from_props, strict=True):
        names_p, rows_p = _above(props_rows, "Normal", class0_conf)
        dropped += len(props_rows[0]) - len(names_p)
        assert names_f == names_p
        np.testing.assert_array_equal(rows_f, rows_p)
    assert (dropped > 0) == (class0_conf > 0)  # the per-class threshold did drop rows the global one kept
    assert sum(len(names) for names, _ in from_file) >= 3  # pedestrians are found (every other frame with interval=1)
    ignored = [w for w in warnings if "keys without a meaning in inferstream" in w]
    assert len(ignored) == 1
    assert "parse-bbox-func-name" in ignored[0] and "custom-lib-path" in ignored[0]
    assert "num-detected-classes" in ignored[0]
    padding_notes = [w for w in warnings if "symmetric-padding=0" in w]
    assert len(padding_notes) == (1 if name.endswith(".yml") else 0)


def test_pyinfer_config_file_with_only_an_engine_is_a_clear_error(tmp_path: Path, vtest: Path) -> None:
    config = tmp_path / "config_infer_primary.txt"
    config.write_text("[property]\nmodel-engine-file=model_b1_gpu0_fp16.engine\n")
    result = run_pipeline(f"videotestsrc num-buffers=2 ! video/x-raw,format=RGB ! pyinfer config-file={config} "
                          "! fakesink")
    assert len(result.errors) == 1
    assert "is a TensorRT engine, which inferstream cannot run: set onnx-file" in result.errors[0]
