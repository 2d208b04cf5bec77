"""pytracker behind the real person detector on vtest.avi: pedestrians keep their ids while walking through.

No ground truth exists for vtest.avi, so identity is checked by continuity: an id that jumps across the frame
between consecutive frames has been handed to another person (a switch or a reuse). The person detector's scores
run 0.3-0.7, so ByteTrack's thresholds are lowered to suit it (its defaults suit detectors scoring around 0.8).
"""
from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import numpy as np
from gst_helpers import run_pipeline

from inferstream.meta.gstanalytics import read_detections

FRAMES = 40


def test_person_ids_stay_on_their_pedestrian(vtest: Path, person_onnx: Path) -> None:
    desc = (f"filesrc location={vtest} ! decodebin ! videoconvert ! video/x-raw,format=RGB "
            f"! pyinfer model={person_onnx} ! pytracker high-threshold=0.35 new-track-threshold=0.4 "
            f"! identity name=trk eos-after={FRAMES + 1} ! fakesink")

    def tracks(buf: object) -> dict[int, np.ndarray]:
        meta = read_detections(buf)
        ids = meta.dets.track_ids.tolist() if meta and meta.dets.track_ids is not None else []
        boxes = meta.dets.boxes_xyxy.numpy() if meta else np.zeros((0, 4))
        return {i: (b[:2] + b[2:]) / 2 for i, b in zip(ids, boxes) if i >= 0}

    result = run_pipeline(desc, {"trk": tracks}, timeout_s=600)
    assert not result.errors
    per_frame = result.seen["trk"]
    assert len(per_frame) == FRAMES
    assert np.mean([len(f) for f in per_frame[5:]]) >= 3  # most pedestrians carry an id
    path: dict[int, list[tuple[int, np.ndarray]]] = defaultdict(list)
    for t, frame in enumerate(per_frame):
        for track_id, centre in frame.items():
            path[track_id].append((t, centre))
    jumps = [np.linalg.norm(c1 - c0) / (t1 - t0) for seq in path.values()
             for (t0, c0), (t1, c1) in pairwise(seq)]
    long_lived = [i for i, seq in path.items() if len(seq) >= FRAMES // 2]
    print(f"{len(path)} ids over {FRAMES} frames, {len(long_lived)} followed for >= half of them, "
          f"max step {max(jumps):.1f} px/frame")
    assert max(jumps) < 40, "an id jumped to another person"
    assert len(long_lived) >= 3
