"""Running configs for real: per-stream counts, a failing stream removed while the others finish, Ctrl-C that
leaves playable MP4s, and the metrics endpoint of a live run."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import gi
import pytest
import yaml

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from app.media import BLOBS, CLIP_FRAMES, decoded_frames
from inferstream.app.api import run
from inferstream.app.config import load_config
from inferstream.app.console import QuietConsole
from inferstream.app.pipeline import build_plan
from inferstream.app.runner import Runner

Gst.init(None)


def test_run_four_streams_counts_match_frames_in(clips: list[Path]) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "file": str(p)} for i, p in enumerate(clips)],
           "infer": {**BLOBS, "max-latency": 200}}
    result = run(cfg)
    assert result.exit_code == 0 and not result.errors
    assert result.frames == {f"cam{i}": n for i, n in enumerate(CLIP_FRAMES)}
    assert {s.status for s in result.snapshot.streams} == {"done"}
    batch = result.snapshot.batch
    assert batch["frames"] == sum(CLIP_FRAMES)  # one batch-group saw every frame of every stream
    assert batch["mean-fill"] > 1.0  # ... and batched across streams


def test_run_infer_config_file_stands_in_for_the_model(tmp_path: Path, person_onnx: Path) -> None:
    nvinfer = tmp_path / "config_infer_primary.txt"
    nvinfer.write_text(f"[property]\nonnx-file={person_onnx}\nmaintain-aspect-ratio=1\nsymmetric-padding=1\n"
                       "[class-attrs-all]\npre-cluster-threshold=0.3\n")
    result = run({"sources": [{"id": "bars", "test": "smpte", "num-buffers": 3, "width": 160, "height": 120}],
                  "infer": {"config-file": str(nvinfer)}})
    assert result.exit_code == 0 and not result.errors and result.frames == {"bars": 3}


def test_run_test_sources_write_one_mp4_each(tmp_path: Path) -> None:
    cfg = {"sources": [{"id": "bars", "test": "smpte", "num-buffers": 9, "width": 160, "height": 120},
                       {"id": "ball", "test": "ball", "num-buffers": 5, "width": 160, "height": 120}],
           "infer": BLOBS, "osd": {}, "sink": {"type": "file", "path": str(tmp_path / "{id}.mp4")}}
    result = run(cfg)
    assert result.exit_code == 0 and result.frames == {"bars": 9, "ball": 5}
    assert {k: decoded_frames(Path(v)) for k, v in result.outputs.items()} == {"bars": 9, "ball": 5}


@pytest.mark.parametrize("kind", ["missing", "corrupt"])
def test_run_bad_file_fails_that_stream_only(clips: list[Path], tmp_path: Path, kind: str) -> None:
    """missing: filesrc fails while the pipeline starts; corrupt: the demuxer fails later, during preroll."""
    bad = tmp_path / f"{kind}-clip.mp4"
    if kind == "corrupt":
        bad.write_bytes(b"garbage, not an mp4 at all" * 10)
    cfg = {"sources": [{"id": "good", "file": str(clips[1])}, {"id": "gone", "file": str(bad)}],
           "infer": BLOBS, "sink": {"type": "file", "path": str(tmp_path / "out" / "{id}.mp4")}}
    result = run(cfg)
    assert result.exit_code == 1
    assert result.frames["good"] == CLIP_FRAMES[1]
    assert set(result.errors) == {"gone"}
    if kind == "missing":
        assert str(bad) in result.errors["gone"]  # the message names the file
    assert decoded_frames(tmp_path / "out" / "good.mp4") == CLIP_FRAMES[1]
    assert not (tmp_path / "out" / "gone.mp4").exists()  # no empty MP4 left behind


@pytest.mark.parametrize("container", ["mp4", "avi"])
def test_run_max_frames_gives_exactly_that_many_frames(clips: list[Path], vtest: Path, tmp_path: Path,
                                                       container: str) -> None:
    """identity eos-after alone let an H.264 decoder drain one more frame from an MP4 (N+1)."""
    source = clips[3] if container == "mp4" else vtest  # 12-frame H.264 MP4; OpenCV's vtest.avi (MPEG-4 part 2)
    cfg = {"sources": [{"id": "s", "file": str(source), "max-frames": 5}], "infer": BLOBS,
           "sink": {"type": "file", "path": str(tmp_path / "{id}.mp4")}}
    result = run(cfg)
    assert result.exit_code == 0 and result.frames == {"s": 5}
    assert decoded_frames(tmp_path / "s.mp4") == 5


def test_run_unreachable_rtsp_fails_that_stream_only(clips: list[Path]) -> None:
    cfg = {"sources": [{"id": "cam", "uri": "rtsp://127.0.0.1:9/nothing"}, {"id": "clip", "file": str(clips[0])}],
           "infer": BLOBS}
    result = run(cfg)
    assert result.exit_code == 1 and result.frames["clip"] == CLIP_FRAMES[0]
    assert "cam" in result.errors and set(result.errors) == {"cam"}



def test_run_messages_publish_one_payload_per_frame_per_stream(tmp_path: Path) -> None:
    cfg = {"sources": [{"id": "bars", "test": "smpte", "num-buffers": 7, "width": 160, "height": 120},
                       {"id": "ball", "test": "ball", "num-buffers": 4, "width": 160, "height": 120}],
           "infer": BLOBS,
           "messages": {"conv": {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False},
                        "broker": {"proto": "file", "conn-str": str(tmp_path / "{id}.jsonl")}}}
    result = run(cfg)
    assert result.exit_code == 0 and result.frames == {"bars": 7, "ball": 4}
    for sid, n in result.frames.items():
        payloads = [json.loads(line) for line in (tmp_path / f"{sid}.jsonl").read_text().splitlines()]
        assert [p["frame"] for p in payloads] == list(range(n))
        assert {p["stream_id"] for p in payloads} == {sid}  # pyinfer's stream-id, from the config's id

def _plan_with_failure(cfg: dict, stream: int, after: int):
    """The config's plan with ``identity error-after`` spliced into one stream: it dies mid-run."""
    plan = build_plan(load_config(cfg))
    streams = list(plan.streams)
    s = streams[stream]
    streams[stream] = dataclasses.replace(s, description=s.description.replace(
        f"queue name={s.entry}", f"identity error-after={after} ! queue name={s.entry}"))
    return dataclasses.replace(plan, streams=tuple(streams))


def test_run_stream_dying_mid_run_is_removed_and_others_finish(clips: list[Path]) -> None:
    cfg = {"sources": [{"id": "a", "test": "ball", "live": True, "num-buffers": 300, "framerate": 20,
                        "width": 160, "height": 120},
                       {"id": "b", "test": "smpte", "live": True, "num-buffers": 30, "framerate": 20,
                        "width": 160, "height": 120},
                       {"id": "c", "file": str(clips[2])}], "infer": BLOBS}
    result = Runner(_plan_with_failure(cfg, 0, after=10), QuietConsole(summary=False)).run()
    assert result.exit_code == 1 and set(result.errors) == {"a"}
    assert (result.frames["b"], result.frames["c"]) == (30, CLIP_FRAMES[2])
    assert 0 < result.frames["a"] < 10  # died at its 10th frame, half a second into a live run


def test_run_on_stream_error_stop_winds_the_run_down(clips: list[Path]) -> None:
    cfg = {"sources": [{"id": "a", "file": str(clips[0])},
                       {"id": "live", "test": "ball", "live": True, "num-buffers": 600, "width": 160, "height": 120}],
           "infer": BLOBS, "on-stream-error": "stop"}
    result = Runner(_plan_with_failure(cfg, 0, after=3), QuietConsole(summary=False)).run()
    statuses = {s.id: s.status for s in result.snapshot.streams}
    assert statuses == {"a": "failed", "live": "stopped"} and result.exit_code == 1
    # ended at once (not run, when the failure came before PLAYING) or by EOS; never by the EOS timeout
    assert "did not finish" not in (result.errors.get("live") or "")
    assert result.frames["live"] < 100  # of 600 (30 s of live frames)


def _live_config(tmp_path: Path) -> Path:
    cfg = {"sources": [{"id": "live", "test": "ball", "live": True, "num-buffers": 3000, "framerate": 20,
                        "width": 160, "height": 120}],
           "infer": BLOBS, "osd": {}, "sink": {"type": "file", "path": str(tmp_path / "{id}.mp4")}}
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^inferstream_{name} (\S+)$", text, re.MULTILINE)
    assert match, text
    return float(match.group(1))


def test_sigint_finishes_a_playable_mp4_and_exits_130(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "inferstream.app.cli", "run", str(_live_config(tmp_path)), "--console", "plain",
           "--interval", "0.5", "--metrics-port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        first = proc.stdout.readline()  # "metrics: http://127.0.0.1:PORT/metrics"
        url = first.split()[-1]
        assert url.startswith("http://127.0.0.1:"), first
        deadline, frames = time.monotonic() + 90, 0.0
        while frames < 10 and time.monotonic() < deadline:
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(url, timeout=5) as reply:
                    text = reply.read().decode()
            except OSError:
                continue
            if "inferstream_frames_total" in text:
                frames = _metric(text, 'frames_total{stream="live"}')
        assert frames >= 10, "the live run produced no frames"
        assert 'inferstream_stream_up{stream="live"} 1' in text and "inferstream_fps " in text
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Ctrl-C: finishing the streams" in out
    summary = re.search(r"^live\s+stopped\s+(\d+)", out, re.MULTILINE)
    assert summary, out
    assert decoded_frames(tmp_path / "live.mp4") == int(summary.group(1)) >= 10


def test_run_counts_qos_messages_as_late_and_dropped_frames() -> None:
    cfg = {"sources": [{"id": "q", "test": "smpte", "num-buffers": 6, "width": 160, "height": 120}], "infer": BLOBS}
    runner = Runner(build_plan(load_config(cfg)), QuietConsole(summary=False))

    def post_qos(stream: str, frame: int, buf: Gst.Buffer) -> None:  # what a late video sink posts
        if frame in (2, 4):
            sink = runner.pipeline.get_by_name(f"stream-{stream}").get_by_name(f"{stream}_sink")
            msg = Gst.Message.new_qos(sink, False, buf.pts, buf.pts, buf.pts, buf.duration)
            msg.set_qos_stats(Gst.Format.BUFFERS, frame, frame // 2)
            sink.post_message(msg)

    runner.frame_hooks = (post_qos,)
    result = runner.run()
    view = result.snapshot.streams[0]
    assert (view.frames, view.late, view.dropped) == (6, 2, 2)  # dropped: the sink's latest running total
