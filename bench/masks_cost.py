"""yolo-seg through pyinfer vs its raw forward, and what instance masks cost per frame at 20 objects (one run).

    python bench/masks_cost.py [--frames 60] [--objects 20]

Model: yolo11n-seg from ultralytics' yaml with seeded re-drawn weights (as the parity tests; no trained seg weights
ship offline), saved as .pt. Three measurements, side by side:

* pipeline: ``filesrc vtest.avi ! decodebin ! videoconvert ! RGB ! queue ! pyinfer ! fakesink`` frames/s, with
  ``max-detections=N confidence-threshold=0.001`` so every frame carries N masks (random weights score every anchor);
* raw: the backend alone on a ready batch of 1 — a real vtest frame letterboxed to 640x640 (random input would make
  the random-weight network run on denormal floats, several times slower on the CPU);
* masks: per frame at N objects, ``ops.masks.attach_masks`` (prototypes x coefficients over each box at frame
  resolution, the device-to-host copy, the crops) and ``meta.instances.write_instances`` + the read back
  (N SegmentationMtds with their GRAY8 buffers), timed on the rows a real vtest frame gives.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from parity import randomise_yolo
from pyinfer_cpu import pipeline_fps, publish

from inferstream.samples import vtest_path


def seg_model(root: Path) -> Path:
    import torch
    from ultralytics import YOLO

    threads = torch.get_num_threads()
    model = YOLO("yolo11n-seg.yaml")
    randomise_yolo(model.model, 3)
    path = root / "yolo11n-seg-random.pt"
    model.save(path)
    torch.set_num_threads(threads)
    return path


def mask_costs(model: Path, objects: int, repeats: int) -> tuple[float, float, float, float, int]:
    """ms per frame: ``attach_masks``, writing the masks' metadata, reading it back; the raw forward's frames/s on
    the same frame; and the mean mask area (px)."""
    import torch
    from parity import decode_frames

    from inferstream.inference import InferConfig, ModelStep
    from inferstream.meta.gstanalytics import label_quarks, read_detections, write_detections
    from inferstream.meta.instances import write_instances
    from inferstream.models.base import DecodeParams
    from inferstream.ops import masks as ops_masks
    from inferstream.rawframe import RawFrame

    frame = decode_frames(f"filesrc location={vtest_path()} ! decodebin", 1)[0]

    raw = RawFrame("RGB", frame.shape[1], frame.shape[0], (torch.from_numpy(frame),))
    det = ModelStep(InferConfig(model=str(model), trust_checkpoint=True,
                               params=DecodeParams(conf=0.001, iou=0.7, max_det=objects)))
    captured: list[tuple] = []
    original = ops_masks.attach_masks

    def spy(*args: object) -> object:
        captured.append(args)
        return original(*args)  # type: ignore[arg-type]

    ops_masks.attach_masks = spy  # type: ignore[assignment]
    (dets,) = det.infer([raw])
    ops_masks.attach_masks = original
    args = captured[0]
    from inferstream.ops.letterbox import preprocess_batch

    batch, _ = preprocess_batch([raw], det.input_size, det.backend.device, det.backend.dtype)
    det.backend(batch)
    t0 = time.perf_counter()
    for _ in range(repeats):
        det.backend(batch)
    raw_fps = repeats / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(repeats):
        original(*args)
    assemble = (time.perf_counter() - t0) / repeats * 1e3
    quarks = label_quarks(det.labels)
    write_times, read_times = [], []
    for _ in range(repeats):
        buf = Gst.Buffer.new_allocate(None, 16, None)
        t0 = time.perf_counter()
        write_instances(buf, dets, write_detections(buf, dets, quarks))
        t1 = time.perf_counter()
        read_detections(buf)
        write_times.append(t1 - t0)
        read_times.append(time.perf_counter() - t1)
    area = int(statistics.mean(m.numel() for m in dets.masks)) if dets.masks else 0
    assert dets.masks is not None and len(dets) == objects, f"{len(dets)} objects, expected {objects}"
    return assemble, statistics.median(write_times) * 1e3, statistics.median(read_times) * 1e3, raw_fps, area


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--objects", type=int, default=20)
    args = parser.parse_args()
    Gst.init(None)
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        model = seg_model(Path(tmp))
        pipe = pipeline_fps(model, args.frames, f"max-detections={args.objects} confidence-threshold=0.001 "
                                                "iou-threshold=0.7")
        assemble, write, read, raw, area = mask_costs(model, args.objects, 20)
    header = (f"CPU: {torch.get_num_threads()} torch threads, {args.frames} frames of vtest.avi (768x576), batch 1, "
              f"{args.objects} objects per frame (mean mask crop {area} px)")
    columns = ("| model | raw forward (frames/s) | pipeline (frames/s) | ratio | masks assembled (ms/frame) | "
               "mask metadata written (ms/frame) | read back (ms/frame) |")
    row = (f"| yolo11n-seg (random, pt, torch) | {raw:.2f} | {pipe:.2f} | {pipe / raw:.2f} | {assemble:.2f} | "
           f"{write:.2f} | {read:.2f} |")
    lines = [header, "", columns, "|---|---|---|---|---|---|---|", row]
    publish("masks_cost", lines)


if __name__ == "__main__":
    sys.exit(main())
