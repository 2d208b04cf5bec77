"""pyinfer pipeline throughput vs the same model's raw forward, side by side in one run (CPU).

    python bench/pyinfer_cpu.py [--frames 120]

Pipeline: filesrc vtest.avi ! decodebin ! videoconvert ! RGB ! queue ! pyinfer ! fakesink (decode runs on its own
thread, as in any real pipeline). Raw: the backend called on an already letterboxed batch of the same size, in a
loop — no decode, no colour conversion, no decoding of outputs, no metadata. The ratio is pipeline / raw.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.samples import person_detector, vtest_path

RESULTS = Path(__file__).resolve().parent / "results"


def publish(name: str, lines: list[str], *, show: bool = True) -> None:
    """Print a bench's markdown (``show``) and keep it as ``results/NAME.md``, what BENCHMARKS.md quotes."""
    text = "\n".join(lines)
    if show:
        print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(text + "\n")


def pipeline_fps(model: Path | str, frames: int, extra: str = "") -> float:
    """Frames per second through the whole pipeline, timed from the first to the last buffer out of pyinfer."""
    desc = (f"filesrc location={vtest_path()} ! decodebin ! videoconvert ! video/x-raw,format=RGB ! queue "
            f"max-size-buffers=8 ! pyinfer name=inf model={model} trust-checkpoint=true {extra} "
            f"! identity name=out eos-after={frames} ! fakesink sync=false")
    return buffer_fps(desc)


def buffer_fps(desc: str, warmup: int | None = None) -> float:
    """Frames per second out of the element named ``out`` of ``desc``, played to EOS: from the first buffer after
    ``warmup`` (None: up to 5, a quarter of them at most) to the last."""
    pipeline = Gst.parse_launch(desc)
    stamps: list[float] = []
    pipeline.get_by_name("out").get_static_pad("src").add_probe(
        Gst.PadProbeType.BUFFER, lambda *_: (stamps.append(time.perf_counter()), Gst.PadProbeReturn.OK)[1])
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(600 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if msg is None or msg.type == Gst.MessageType.ERROR:
        raise SystemExit(f"pipeline failed: {msg.parse_error() if msg else 'timeout'}")
    skip = min(5, len(stamps) // 4) if warmup is None else warmup
    return (len(stamps) - 1 - skip) / (stamps[-1] - stamps[skip])


def raw_fps(model: Path | str, frames: int, size: tuple[int, int] = (640, 640), batch: int = 1,
            device: str = "cpu") -> float:
    """Forward passes per second of the backend alone on a ready ``(batch, 3, *size)`` input (``size``: height,
    width); on CUDA each pass is waited for."""
    import torch

    from inferstream.backends.loader import load_backend

    backend = load_backend(str(model), device=device, trust_checkpoint=True)
    x = torch.rand((batch, 3, *size), dtype=backend.dtype, device=backend.device)
    for _ in range(3):
        backend(x)
    times = []
    for _ in range(frames):
        t0 = time.perf_counter()
        backend(x)
        if backend.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 1.0 / statistics.mean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=120)
    args = parser.parse_args()
    Gst.init(None)
    import torch

    rows = []
    for kind in ("onnx", "pt"):
        model = person_detector(kind)
        raw = raw_fps(model, args.frames)
        pipe = pipeline_fps(model, args.frames)
        rows.append((f"YOLOv8s person ({kind}, {'ONNX Runtime' if kind == 'onnx' else 'torch'})", raw, pipe))
    lines = [f"CPU: {torch.get_num_threads()} torch threads, {args.frames} frames of vtest.avi (768x576), batch 1",
             "", "| model | raw forward (frames/s) | pipeline (frames/s) | ratio |", "|---|---|---|---|"]
    lines += [f"| {name} | {raw:.2f} | {pipe:.2f} | {pipe / raw:.2f} |" for name, raw, pipe in rows]
    publish("pyinfer_cpu", lines)


if __name__ == "__main__":
    sys.exit(main())
