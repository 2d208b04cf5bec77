"""Two-stage pipeline (person detector -> secondary classifier on its boxes) vs its parts, side by side in one run.

    python bench/secondary_cpu.py [--frames 60] [--size 224] [--device cpu]

Rows, all on vtest.avi (768x576) in one process:
  * detector alone: ``... ! pyinfer (person) ! fakesink``;
  * two-stage: ``... ! pyinfer (person) ! pyinfer process-mode=secondary (ResNet-18) ! fakesink``;
  * the classifier's raw forward on a ready ``(K, 3, size, size)`` batch, K = the mean objects per frame of the
    two-stage run (the secondary classifies one frame's objects per batch at batch-size 1), as frames/s.
The secondary's own cost per frame is its batch time (its ``stats`` property: map, crop, forward, metadata; batch
1 = one frame) and ``1/two-stage - 1/detector``; next to the raw forward's time per frame it shows what cropping and
metadata add around the classifier. On a loaded shared machine only the in-run figures (stats vs raw) compare.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.samples import person_detector, vtest_path

CLASSIFIER = "torchvision.models:resnet18"  # weights=None: random init, 1000 classes (speed only)


def _run(desc: str) -> tuple[float, float, dict[str, float]]:
    """(frames/s from the first to the last buffer out of ``out``, mean objects per frame, the ``stats`` of the
    element named ``sec`` when there is one)."""
    import json

    from inferstream.meta.gstanalytics import read_detections

    pipeline = Gst.parse_launch(desc)
    stamps: list[float] = []
    objects: list[int] = []

    def probe(_pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        stamps.append(time.perf_counter())
        meta = read_detections(info.get_buffer())
        objects.append(0 if meta is None else len(meta.dets))
        return Gst.PadProbeReturn.OK

    pipeline.get_by_name("out").get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, probe)
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(1200 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    sec = pipeline.get_by_name("sec")
    stats = json.loads(sec.get_property("stats")) if sec is not None else {}
    pipeline.set_state(Gst.State.NULL)
    if msg is None or msg.type == Gst.MessageType.ERROR:
        raise SystemExit(f"pipeline failed: {msg.parse_error() if msg else 'timeout'}")
    skip = min(5, len(stamps) // 4)  # warm-up frames
    return (len(stamps) - 1 - skip) / (stamps[-1] - stamps[skip]), statistics.mean(objects), stats


def _raw_fps(batch: int, size: int, device: str, frames: int) -> float:
    """Frames/s of the classifier alone on a ready ``(batch, 3, size, size)`` input (one batch per frame)."""
    from pyinfer_cpu import raw_fps

    return raw_fps(CLASSIFIER, frames, (size, size), batch=batch, device=device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--size", type=int, default=224, help="classifier input (square)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    Gst.init(None)
    import torch

    src = (f"filesrc location={vtest_path()} ! decodebin ! videoconvert ! video/x-raw,format=RGB ! queue "
           f"max-size-buffers=8 ! pyinfer model={person_detector('onnx')} device={args.device} ")
    out = f"! identity name=out eos-after={args.frames} ! fakesink sync=false"
    # interleaved (raw, detector, two-stage, raw again): on a shared machine the load moves between runs
    two_stage_desc = src + f"! pyinfer name=sec process-mode=secondary model={CLASSIFIER} device={args.device} " \
        f"input-size={args.size} " + out
    batch = 5  # vtest's typical count; the real mean is printed with the results
    raw_before = _raw_fps(batch, args.size, args.device, args.frames)
    detector, _, _ = _run(src + out)
    two_stage, per_frame, stats = _run(two_stage_desc)
    raw = statistics.mean([raw_before, _raw_fps(batch, args.size, args.device, args.frames)])
    cost_ms = 1e3 * (1 / two_stage - 1 / detector)
    lines = [(f"{args.device}: {torch.get_num_threads()} torch threads, {args.frames} frames of vtest.avi, "
              f"ResNet-18 at {args.size}x{args.size}, {per_frame:.2f} objects per frame"),
             "", "| run | frames/s | ms per frame |", "|---|---|---|",
             f"| detector alone (pipeline) | {detector:.2f} | {1e3 / detector:.1f} |",
             f"| detector + secondary classifier (pipeline) | {two_stage:.2f} | {1e3 / two_stage:.1f} |",
             f"| classifier raw forward, batch {batch} (mean of before and after) | {raw:.2f} | {1e3 / raw:.1f} |",
             (f"| secondary's batch in the pipeline (map, crop, forward, metadata; its `stats`) | | "
              f"{stats.get('mean-infer-ms', 0.0):.1f} |"),
             f"| difference of the two pipelines | | {cost_ms:.1f} |"]
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
