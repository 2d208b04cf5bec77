"""tools/deepstream_check.py where DeepStream is absent (here), and its per-frame comparison."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import torch

from inferstream.detections import Detections
from inferstream.meta.nvds_fields import object_fields

TOOL = Path(__file__).resolve().parents[2] / "tools" / "deepstream_check.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deepstream_check", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_back(fields: list) -> list[dict]:
    """What read_objects returns for metas holding exactly ``fields``."""
    return [{"box": (f.left, f.top, f.width, f.height), "class_id": f.class_id, "label": f.label,
             "confidence": f.confidence, "unique_component_id": f.unique_component_id, "object_id": f.object_id,
             "border_width": f.border_width, "display_text": f.display_text} for f in fields]


def test_compare_accepts_equal_objects_and_names_each_difference() -> None:
    tool = _tool()
    dets = Detections(boxes_xyxy=torch.tensor([[10.0, 10.0, 110.0, 210.0], [300.0, 40.0, 360.0, 90.0]]),
                      scores=torch.tensor([0.9, 0.6]), labels=torch.tensor([0, 1]))
    expected = object_fields(dets, ("person", "car"), (640, 360), (1280, 720), unique_id=3)
    got = _read_back(expected)
    assert tool.compare(list(reversed(got)), expected, conf=0.25) == []
    got[0]["confidence"], got[1]["class_id"] = 0.8, 0
    assert tool.compare(got, expected, conf=0.25) == ["confidence 0.800 != 0.900", "class_id 0 != 1"]
    moved = dict(got[1], box=(0.0, 600.0, 10.0, 10.0))
    assert tool.compare([got[0], moved], expected, conf=0.25) == [
        "confidence 0.800 != 0.900", "missing car 0.60 at [600, 80, 120, 100]", "extra car 0.60"]


def test_without_deepstream_it_says_it_cannot_run(vtest: Path, person_onnx: Path) -> None:
    out = subprocess.run([sys.executable, str(TOOL), "--video", str(vtest), "--model", str(person_onnx)],
                         check=False, capture_output=True, text=True, timeout=120)
    first = out.stdout.splitlines()[0]
    assert out.returncode == 2, out.stdout + out.stderr
    assert first == ("deepstream-check: CANNOT RUN: elements not found: nvstreammux, nvvideoconvert, nvtracker, "
                     "nvdsosd, nvmsgconv")
    assert "--- paste into an issue" in out.stdout and "deepstream: not found at /opt/nvidia" in out.stdout
