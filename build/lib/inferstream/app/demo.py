"""``inferstream demo``: vtest.avi through the person detector (+ tracker when registered) and the OSD into an MP4,
with one JSONL event per detection."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from inferstream.app import gstprops
from inferstream.app.api import run
from inferstream.app.events import JsonlEvents


def demo_config(video: Path, model: Path, out_dir: Path, frames: int | None, tracking: bool) -> dict[str, Any]:
    source: dict[str, Any] = {"id": "vtest", "file": str(video)}
    if frames:
        source["max-frames"] = frames
    cfg: dict[str, Any] = {"sources": [source], "infer": {"model": str(model)}, "osd": {},
                           "sink": {"type": "file", "path": str(out_dir / "demo.mp4")}}
    if tracking:  # the person detector scores 0.3-0.7: ByteTrack's defaults expect detectors scoring ~0.8
        cfg["tracker"] = {"high-threshold": 0.35, "new-track-threshold": 0.4}
    return cfg


def demo(frames: int | None = None, output: str | Path = "inferstream-demo", console: str = "auto",
         metrics_port: int | None = None, interval_s: float = 2.0, eos_timeout_s: float = 10.0) -> int:
    """Run the demo; returns the exit code (prints where the outputs are)."""
    from inferstream.samples import person_detector, vtest_path

    out_dir = Path(output)
    tracking = gstprops.element_available("pytracker")
    cfg = demo_config(vtest_path(), person_detector("onnx"), out_dir, frames, tracking)
    print(f"demo: vtest.avi ({frames or 'all'} frames) -> person detector (ONNX)"
          f"{' -> pytracker' if tracking else ' (pytracker not registered: no tracking)'} -> pyosd -> MP4",
          flush=True)
    events = JsonlEvents(out_dir / "events.jsonl")
    t0 = time.monotonic()
    try:
        result = run(cfg, console=console, metrics_port=metrics_port, frame_hooks=[events], interval_s=interval_s,
                     eos_timeout_s=eos_timeout_s)
    finally:
        events.close()
    wall = time.monotonic() - t0
    frames_done = sum(result.frames.values())
    print(f"demo: {frames_done} frames in {wall:.1f} s wall ({frames_done / wall if wall else 0:.1f} fps incl. "
          f"model load); {events.events} detections")
    print(f"  video:  {out_dir / 'demo.mp4'}")
    print(f"  events: {events.path}")
    return result.exit_code
