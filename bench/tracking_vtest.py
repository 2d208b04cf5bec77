"""pytracker behind the real person detector on vtest.avi: how many ids, and how fragmented the tracks are.

    python bench/tracking_vtest.py [--frames 795] [--out bench/results/tracking_vtest.md]

Pipeline: filesrc vtest.avi ! decodebin ! videoconvert ! RGB ! pyinfer (YOLOv8s person, ONNX) ! pytracker (the
thresholds tests/elements/test_tracking_vtest.py uses: this detector scores 0.3-0.7) ! fakesink. There is no
ground truth for vtest.avi, so fragmentation is measured from the tracks alone:

- distinct ids: fewer for the same pedestrians means fewer breaks (a pedestrian whose track breaks gets a new id);
- short tracks: ids seen on less than 1 s of frames (mostly fragments, a few false positives);
- re-births: a track ends and a new id appears within 1 s, closer than half a box height to where the old one
  was last seen: the same pedestrian picked up again under another id;
- duplicates: frames where two ids sit on boxes overlapping by IoU > 0.5 (a second track on one pedestrian);
- max step: the largest jump of one id between consecutive frames it is seen on, px per frame (an id handed to
  another pedestrian jumps).
"""
from __future__ import annotations

import argparse
import itertools
import sys
from collections import defaultdict
from pathlib import Path

import gi
import numpy as np

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.meta.gstanalytics import read_detections
from inferstream.samples import person_detector, vtest_path
from inferstream.tracking.geometry import iou_matrix_xyxy

TRACKER = "pytracker high-threshold=0.35 new-track-threshold=0.4"


def run(frames: int) -> list[tuple[float, dict[int, np.ndarray]]]:
    """(pts seconds, {track id: xyxy box}) per frame out of pytracker."""
    desc = (f"filesrc location={vtest_path()} ! decodebin ! videoconvert ! video/x-raw,format=RGB "
            f"! pyinfer model={person_detector('onnx')} ! {TRACKER} ! identity name=out eos-after={frames} "
            f"! fakesink sync=false")
    pipeline = Gst.parse_launch(desc)
    seen: list[tuple[float, dict[int, np.ndarray]]] = []

    def probe(_pad: Gst.Pad, info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        buf = info.get_buffer()
        meta = read_detections(buf)
        boxes: dict[int, np.ndarray] = {}
        if meta is not None and meta.dets.track_ids is not None:
            for i, b in zip(meta.dets.track_ids.tolist(), meta.dets.boxes_xyxy.numpy()):
                if i >= 0:
                    boxes[i] = b.astype(np.float64)
        seen.append((buf.pts / Gst.SECOND, boxes))
        return Gst.PadProbeReturn.OK

    pipeline.get_by_name("out").get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, probe)
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(1800 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if msg is None or msg.type == Gst.MessageType.ERROR:
        raise SystemExit(f"pipeline failed: {msg.parse_error() if msg else 'timeout'}")
    return seen


def stats(seen: list[tuple[float, dict[int, np.ndarray]]]) -> dict[str, float]:
    """The fragmentation measures of the module docstring."""
    path: dict[int, list[tuple[int, float, np.ndarray]]] = defaultdict(list)
    duplicates = 0
    for k, (t, boxes) in enumerate(seen):
        for i, b in boxes.items():
            path[i].append((k, t, b))
        if len(boxes) > 1:
            iou = iou_matrix_xyxy(np.array(list(boxes.values())), np.array(list(boxes.values())))
            duplicates += int((np.triu(iou, 1) > 0.5).any())
    fps = (len(seen) - 1) / max(seen[-1][0] - seen[0][0], 1e-9)
    short = sum(1 for p in path.values() if len(p) < fps)
    steps = [np.linalg.norm((b1[:2] + b1[2:] - b0[:2] - b0[2:]) / 2) / (k1 - k0)
             for p in path.values() for (k0, _, b0), (k1, _, b1) in itertools.pairwise(p)]
    ends = [(p[-1][1], p[-1][2]) for p in path.values()]
    starts = [(p[0][1], p[0][2]) for p in path.values()]
    rebirths = 0
    for t_end, b_end in ends:
        centre, height = (b_end[:2] + b_end[2:]) / 2, b_end[3] - b_end[1]
        rebirths += any(0 < t0 - t_end <= 1.0 and np.linalg.norm((b0[:2] + b0[2:]) / 2 - centre) < height / 2
                        for t0, b0 in starts)
    return {"frames": len(seen), "distinct ids": len(path), "ids per frame": float(np.mean([len(b) for _, b in seen])),
            "mean track length (frames)": float(np.mean([len(p) for p in path.values()])),
            "short tracks (< 1 s)": short, "re-births": rebirths, "duplicate frames": duplicates,
            "max step (px/frame)": float(max(steps, default=0.0))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=795, help="vtest.avi has 795")
    ap.add_argument("--label", default="this tree", help="row name")
    ap.add_argument("--out", type=Path, help="append the row to this markdown file")
    args = ap.parse_args()
    Gst.init(None)
    s = stats(run(args.frames))
    header = "| code | " + " | ".join(s) + " |"
    row = f"| {args.label} | " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in s.values()) + " |"
    print(header, "|---" * (len(s) + 1) + "|", row, sep="\n")
    if args.out is not None:
        new = not args.out.exists()
        with args.out.open("a") as f:
            f.write((f"{header}\n" + "|---" * (len(s) + 1) + "|\n" if new else "") + row + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
