"""A small JSONL detection log, fed by a frame hook (the demo's stand-in for pymsgconv + pymsgbroker proto=file).

One line per detection: ``{"stream", "frame", "pts", "box": [x1, y1, x2, y2], "label", "confidence", "track_id"}``
(pts in nanoseconds or null; box in frame pixels; track_id null when untracked; "angle" added for oriented boxes).
The lines go through the file broker's writer (``messaging.brokers.file``), the one JSONL writer of the house.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.messaging.brokers.file import JsonlFileClient, file_endpoint


class JsonlEvents:
    """Callable frame hook writing detections to ``path``; ``close()`` when the run is over."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(b"")  # a new log per run; the writer appends
        self._writer = JsonlFileClient(file_endpoint(str(self.path)), fsync=False)
        self._writer.connect(timeout=0)
        self._lock = threading.Lock()
        self.events = 0
        self.frames = 0

    def __call__(self, stream_id: str, frame: int, buf: Gst.Buffer) -> None:
        from inferstream.meta.gstanalytics import read_detections

        meta = read_detections(buf)
        pts = None if buf.pts == Gst.CLOCK_TIME_NONE else int(buf.pts)
        lines = []
        if meta is not None and len(meta.dets):
            d = meta.dets
            tracks = d.track_ids.tolist() if d.track_ids is not None else [-1] * len(d)
            angles = d.angles_rad.tolist() if d.angles_rad is not None else [None] * len(d)
            rows = zip(d.boxes_xyxy.tolist(), d.scores.tolist(), d.labels.tolist(), tracks, angles, strict=True)
            for box, score, label, track, angle in rows:
                event = {"stream": stream_id, "frame": frame, "pts": pts, "box": [round(v, 1) for v in box],
                         "label": meta.label_names[label], "confidence": round(score, 4),
                         "track_id": track if track >= 0 else None}
                if angle is not None:
                    event["angle"] = round(angle, 4)
                lines.append(("events", json.dumps(event).encode(), None))
        with self._lock:
            self.frames += 1
            self.events += len(lines)
            if lines:
                self._writer.publish_batch(lines)

    def close(self) -> None:
        with self._lock:
            self._writer.close()
