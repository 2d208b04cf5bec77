"""inferstream demo --frames 20: a real person detector on vtest.avi; the MP4 decodes to 20 frames and the JSONL
holds exactly one event per detection (counted independently from the frames' GstAnalytics meta)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import gi
import pytest

gi.require_version("Gst", "1.0")
gi.require_version("GstAnalytics", "1.0")
from gi.repository import Gst, GstAnalytics

import inferstream.app.demo as demo_module
from app.media import decoded_frames
from inferstream.app.cli import main

EVENT_KEYS = {"stream", "frame", "pts", "box", "label", "confidence", "track_id"}


def test_demo_writes_mp4_and_one_event_per_detection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     vtest: Path, person_onnx: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    detections: dict[int, int] = {}

    def count_ods(_stream: str, frame: int, buf: Gst.Buffer) -> None:  # a second, independent reader
        rmeta = GstAnalytics.buffer_get_analytics_relation_meta(buf)
        detections[frame] = sum(isinstance(m, GstAnalytics.ODMtd) for m in rmeta) if rmeta else 0

    real_run = demo_module.run
    monkeypatch.setattr(demo_module, "run", lambda cfg, **kw: real_run(
        cfg, **{**kw, "frame_hooks": [*kw["frame_hooks"], count_ods]}))
    out = tmp_path / "demo-out"
    assert main(["demo", "--frames", "20", "--output", str(out), "--console", "quiet"]) == 0
    printed = capsys.readouterr().out
    assert str(out / "demo.mp4") in printed and str(out / "events.jsonl") in printed

    assert decoded_frames(out / "demo.mp4") == 20
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert events and all(set(e) == EVENT_KEYS for e in events)
    assert sorted(detections) == list(range(20))
    assert Counter(e["frame"] for e in events) == Counter({f: n for f, n in detections.items() if n})
    assert sum(detections.values()) >= 40  # vtest has several walking people on every frame
    assert {e["label"] for e in events} <= {"Normal", "Fall"}
    assert all(0 <= e["box"][0] <= e["box"][2] <= 768 and 0 <= e["box"][1] <= e["box"][3] <= 576 for e in events)
    pts = {e["frame"]: e["pts"] for e in events}
    assert all(pts[f] == f * Gst.SECOND // 10 for f in pts)  # vtest is 10 fps
    assert any(e["track_id"] is not None for e in events if e["frame"] >= 5)


def test_demo_rejects_zero_frames(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--frames", "0"]) == 2
    assert "--frames must be at least 1" in capsys.readouterr().err
