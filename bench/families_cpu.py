"""DETR families: pyinfer pipeline throughput next to the same model's raw forward, side by side in one run (CPU).

    python bench/families_cpu.py [--frames 30] [--only rfdetr-torch,rfdetr-onnx,rtdetr,dfine]

Pipeline as ``bench/pyinfer_cpu.py``: vtest.avi ! decodebin ! videoconvert ! RGB ! queue ! pyinfer ! fakesink, batch
1. Raw: the backend called on a ready batch of the model's input size. Models are built offline with seeded random
weights (``tests/detr_models.py`` for RF-DETR Nano and transformers' D-FINE; ultralytics' ``rtdetr-l.yaml``); the
RF-DETR ONNX file is rfdetr's own export, cached in ``.cache/bench/``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from pyinfer_cpu import pipeline_fps, publish, raw_fps

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def _models(cache: Path) -> dict[str, tuple[str, tuple[int, int], str]]:
    """name -> (model spec, input (h, w), extra pyinfer properties), built on demand."""
    return {
        "rfdetr-torch": (f"{TESTS / 'detr_models.py'}:rfdetr_nano", (384, 384), "input-size=384"),
        "rfdetr-onnx": (str(cache / "rfdetr-nano.onnx"), (384, 384), ""),
        "rtdetr": (str(cache / "rtdetr-l.pt"), (640, 640), "input-size=640"),
        "dfine": (f"{TESTS / 'detr_models.py'}:dfine", (320, 320), "input-size=320 model-family=detr mean=0 std=1"),
    }


def _build(name: str, cache: Path) -> None:
    import torch

    if name == "rfdetr-onnx" and not (cache / "rfdetr-nano.onnx").is_file():
        from detr_models import rfdetr_reference

        rfdetr_reference().export(output_dir=str(cache))
    if name == "rtdetr" and not (cache / "rtdetr-l.pt").is_file():
        from ultralytics import RTDETR

        threads = torch.get_num_threads()
        torch.manual_seed(0)
        RTDETR("rtdetr-l.yaml").save(cache / "rtdetr-l.pt")
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=30)
    parser.add_argument("--only", default="rfdetr-torch,rfdetr-onnx,rtdetr,dfine")
    args = parser.parse_args()
    Gst.init(None)
    sys.path.insert(0, str(TESTS))
    import torch

    from inferstream.cache import cache_dir

    cache = cache_dir() / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    models = _models(cache)
    rows = []
    for name in args.only.split(","):
        _build(name, cache)
        spec, size, extra = models[name]
        raw = raw_fps(spec, args.frames, size)
        pipe = pipeline_fps(spec, args.frames, f"{extra} confidence-threshold=0.5")
        rows.append((name, f"{size[1]}x{size[0]}", raw, pipe))
        print(rows[-1], flush=True)
    lines = [f"CPU: {torch.get_num_threads()} torch threads, {args.frames} frames of vtest.avi (768x576), batch 1",
             "", "| model | input | raw forward (frames/s) | pipeline (frames/s) | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {size} | {raw:.2f} | {pipe:.2f} | {pipe / raw:.2f} |" for name, size, raw, pipe in rows]
    publish("families_cpu", lines)


if __name__ == "__main__":
    main()
