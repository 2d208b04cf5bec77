"""pyinfer's ``stats`` say where a batch's time goes (``batching.STAGES``): measured against a model whose forward
is known to take a fixed time, and a downstream that tracks; the app prints the same stages in its summary."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gi
import yaml
from gst_helpers import run_pipeline

gi.require_version("Gst", "1.0")
from gi.repository import Gst

FORWARD_S = 0.06

SLOW_MODEL = f'''
import time
import torch
from torch import nn


class SlowDetector(nn.Module):
    """A yolo head with no confident box, after sleeping {FORWARD_S} s: a forward whose length is known."""

    names = {{0: "thing"}}
    task = "detect"
    input_size = (64, 64)

    def forward(self, x):
        time.sleep({FORWARD_S})
        return torch.zeros(x.shape[0], 5, 84)


def make():
    return SlowDetector()


class SlowClassifier(nn.Module):
    """Two classes, after sleeping {FORWARD_S} s."""

    names = {{0: "a", 1: "b"}}

    def forward(self, x):
        time.sleep({FORWARD_S})
        return torch.zeros(x.shape[0], 2)


def make_classifier():
    return SlowClassifier()
'''


def _model(tmp_path: Path) -> Path:
    path = tmp_path / "slow_model.py"
    path.write_text(SLOW_MODEL)
    return path


def test_the_model_stage_holds_the_forward_and_the_stages_fit_in_the_batch(tmp_path: Path) -> None:
    model, frames, streams = _model(tmp_path), 12, 2
    desc = "  ".join(f"videotestsrc num-buffers={frames} ! video/x-raw,format=RGB,width=96,height=72 ! pyinfer "
                     f"name=inf{k} model={model}:make model-family=yolo input-size=64 batch-group=slow "
                     f"batch-size={streams} max-latency=2000 ! pytracker ! fakesink" for k in range(streams))
    stats: list[dict[str, float]] = []
    result = run_pipeline(desc, timeout_s=120, on_message=lambda p, m: stats.append(
        json.loads(p.get_by_name("inf0").get_property("stats"))) if m.type == Gst.MessageType.EOS else None)
    assert result.eos and not result.errors, result.errors
    s = stats[-1]
    assert s["frames"] == frames * streams
    stages = {k: v for k, v in s.items() if k not in ("mean-infer-ms", "mean-wait-ms") and k.endswith("-ms")}
    assert set(stages) == {"mean-turn-wait-ms", "mean-preprocess-ms", "mean-model-ms", "mean-decode-ms",
                           "mean-deliver-ms"}
    assert 1e3 * FORWARD_S <= s["mean-model-ms"] < 1e3 * FORWARD_S + 40, s  # the sleep, and not much more
    assert max(s["mean-preprocess-ms"], s["mean-decode-ms"], s["mean-deliver-ms"]) < 1e3 * FORWARD_S, s
    assert all(v >= 0 for v in stages.values()) and sum(stages.values()) <= s["mean-infer-ms"] + 0.01, s


def test_the_apps_summary_says_where_a_batchs_time_goes(tmp_path: Path) -> None:
    cfg = {"sources": [{"test": "ball", "num-buffers": 6, "width": 96, "height": 72}] * 2,
           "infer": {"model": f"{_model(tmp_path)}:make", "model-family": "yolo", "input-size": 64}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = subprocess.run([sys.executable, "-m", "inferstream.app.cli", "run", str(path)], capture_output=True,
                         text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("a batch's time: "))
    parts = dict(part.rsplit(" ", 1) for part in line.removeprefix("a batch's time: ").removesuffix(" ms").split(", "))
    assert list(parts) == ["turn-wait", "preprocess", "model", "decode", "deliver"]
    assert float(parts["model"]) >= 1e3 * FORWARD_S


def test_a_secondary_classifier_reports_its_stages_too(tmp_path: Path) -> None:
    import torch

    from inferstream.inference import InferConfig
    from inferstream.rawframe import RawFrame
    from inferstream.secondary import ObjectClassifier, ObjectFrame

    step = ObjectClassifier(InferConfig(model=f"{_model(tmp_path)}:make_classifier", family="classifier",
                                        input_size=(32, 32), objects=True))
    frame = RawFrame("RGB", 96, 72, (torch.zeros((72, 96, 3), dtype=torch.uint8),))
    (dets,) = step.infer([ObjectFrame(frame, torch.tensor([[4.0, 4.0, 40.0, 60.0]]))])
    assert len(dets) == 1 and set(step.stage_s) == {"preprocess", "model", "decode"}
    assert step.stage_s["model"] >= FORWARD_S > max(step.stage_s["preprocess"], step.stage_s["decode"]), step.stage_s
