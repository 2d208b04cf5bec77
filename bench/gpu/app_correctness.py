#!/usr/bin/env python3
"""The app on the GPU, with workers and a model server, against the app on the CPU: the same detections and
track ids on the correctness clip.

    python bench/gpu/app_correctness.py --out DIR [--streams 8] [--frames 96] [--workers 2] [--preprocess exact]
                                        [--graph inductor]
    python bench/gpu/app_correctness.py --out DIR --device cpu --decode software --model M --clip C  # a dry run

Both runs are ``inferstream run`` on the same config (``--streams`` copies of the check clip, NVDEC decoding, the
trained person detector of ``make_check_inputs.py``, fp32, pytracker, one ``inferstream-frame`` event per frame to
a file per stream). The GPU run: ``infer.device: cuda``, ``--workers N``, ``infer.model-server``, two frames per
stream in flight (frames stay in CUDA memory from the decoder on). The reference: ``infer.device: cpu``, one
process (nvh264dec hands system memory to videoconvert). Per stream and frame, detections are matched as
``bench/gpu/correctness.py`` matches them (label, box edges, score; ``report.compare_detections``); track ids are
compared on the frames whose detections all match within 4 px. Writes ``app_correctness.json``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import compare_detections

ROOT = Path(__file__).resolve().parents[2]
CARRY = ROOT / ".gpu-carry"


def config(args: argparse.Namespace, out: Path, gpu: bool) -> dict[str, Any]:
    infer: dict[str, Any] = {"model": str(args.model), "precision": "fp32", "confidence-threshold": 0.3,
                             "device": args.device if gpu else "cpu"}
    if gpu:
        infer.update({"model-server": {}, "in-flight": 2, "preprocess": args.preprocess, "graph": args.graph})
    return {"sources": [{"id": f"cam{i}", "file": str(args.clip), "max-frames": args.frames}
                        for i in range(args.streams)],
            "decode": args.decode, "infer": infer, "tracker": {}, "sink": {"type": "fakesink"},
            "messages": {"conv": {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False},
                         "broker": {"proto": "file", "conn-str": str(out / "{id}.jsonl")}}}


def run(cfg: dict[str, Any], out: Path, workers: int) -> dict[str, Any]:
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    (out / "run.yaml").write_text(yaml.safe_dump(cfg))
    done = subprocess.run([sys.executable, "-m", "inferstream.app.cli", "run", str(out / "run.yaml"), "--workers",
                           str(workers), "--console", "plain"], capture_output=True, text=True, timeout=400,
                          check=False, cwd=ROOT)
    (out / "app.log").write_text(done.stdout + done.stderr)
    return {"rc": done.returncode, "tail": (done.stdout + done.stderr).strip().splitlines()[-3:]}


def frames_of(path: Path) -> dict[int, Any]:
    """A stream's events as ``Detections`` per frame number (track ids kept)."""
    import torch

    from inferstream.detections import Detections

    found: dict[int, Any] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        objects = event["objects"]
        found[event["frame"]] = Detections(
            boxes_xyxy=torch.tensor([o["bbox"] for o in objects], dtype=torch.float32).reshape(-1, 4),
            scores=torch.tensor([o["confidence"] for o in objects], dtype=torch.float32),
            labels=torch.tensor([o["class_id"] for o in objects], dtype=torch.int64),
            track_ids=torch.tensor([-1 if o["track_id"] is None else o["track_id"] for o in objects],
                                   dtype=torch.int64))
    return found


def same_tracks(gpu: Any, cpu: Any) -> bool:
    """Whether two frames' detections carry the same track ids, box by box (each GPU box with its nearest CPU
    box of the same label)."""
    import torch

    if len(gpu) != len(cpu):
        return False
    for i in range(len(gpu)):
        d = (gpu.boxes_xyxy[i] - cpu.boxes_xyxy).abs().amax(dim=1)
        d[cpu.labels != gpu.labels[i]] = float("inf")
        if float(d.min()) > 4 or int(gpu.track_ids[i]) != int(cpu.track_ids[int(torch.argmin(d))]):
            return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--frames", type=int, default=96,
                    help="frames per stream (the carried clip's 96: make_check_inputs.py)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", type=Path, default=CARRY / "models" / "person-yolov8s.torchscript")
    ap.add_argument("--clip", type=Path, default=CARRY / "clips" / "vtest-h264.mp4")
    ap.add_argument("--preprocess", default="auto", choices=("auto", "exact"),
                    help="the GPU side's pyinfer preprocess (auto: fast on CUDA; exact: the CPU's pixels)")
    ap.add_argument("--graph", default="auto", choices=("auto", "inductor"),
                    help="the GPU side's pyinfer graph (inductor: the model compiled by torch.compile)")
    ap.add_argument("--device", default="cuda", help="the served side's device (cpu: a dry run of this script)")
    ap.add_argument("--decode", default="nvh264dec", help="both sides' decoder (software: a dry run)")
    args = ap.parse_args()
    report: dict[str, Any] = {"streams": args.streams, "frames": args.frames, "workers": args.workers,
                              "preprocess": args.preprocess, "graph": args.graph}
    for side, on_gpu in (("gpu", True), ("cpu", False)):
        folder = args.out / side
        report[side] = run(config(args, folder, on_gpu), folder, args.workers if on_gpu else 1)
    per_stream: list[dict[str, Any]] = []
    tracked, frames = 0, 0
    for i in range(args.streams):
        paths = [args.out / side / f"cam{i}.jsonl" for side in ("gpu", "cpu")]
        if not all(p.is_file() for p in paths):
            per_stream.append({"stream": i, "error": "no events"})
            continue
        gpu, cpu = (frames_of(p) for p in paths)
        row = {"stream": i, "frames_gpu": len(gpu), "frames_cpu": len(cpu),
               "in_order_once": sorted(gpu) == list(range(len(gpu))), **compare_detections(gpu, cpu)}
        both = sorted(set(gpu) & set(cpu))
        row["same_track_ids"] = sum(same_tracks(gpu[f], cpu[f]) for f in both)
        tracked, frames = tracked + row["same_track_ids"], frames + len(both)
        per_stream.append(row)
    report["streams_compared"] = per_stream
    detections = sum(r.get("detections", 0) for r in per_stream)
    report["summary"] = {
        "frames": frames, "detections": detections,
        "matched_1px_1e-3": sum(r.get("matched", 0) for r in per_stream),
        "matched_4px_1e-2": sum(r.get("matched_within_4px_1e-2", 0) for r in per_stream),
        "frames_with_same_track_ids": tracked,
        "every_frame_once_in_order": all(r.get("in_order_once") and r["frames_gpu"] == args.frames
                                         for r in per_stream)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "app_correctness.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("gpu", "cpu", "summary")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
