"""The ``inferstream`` command as a user meets it, run as a subprocess: SIGTERM / SIGHUP finish the recording like
Ctrl-C, errors are one line without a traceback, printed pipelines carry no password."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.media import BLOBS, decoded_frames


def _cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inferstream.app.cli", *args], capture_output=True, text=True,
                          check=False, timeout=120, env=os.environ.copy(), **kw)


def _config(tmp_path: Path, sink_path: str, **extra: Any) -> Path:
    cfg = {"sources": [{"id": "live", "test": "ball", "live": True, "num-buffers": 3000, "framerate": 20,
                        "width": 160, "height": 120}],
           "infer": BLOBS, "sink": {"type": "file", "path": sink_path}, **extra}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_stop_signal_finishes_a_playable_mp4_and_exits_128_plus_n(tmp_path: Path, sig: signal.Signals) -> None:
    """What ``docker stop`` / systemd (SIGTERM) and a closed terminal (SIGHUP) send, mid-recording."""
    config = _config(tmp_path, str(tmp_path / "{id}.mp4"))
    cmd = [sys.executable, "-m", "inferstream.app.cli", "run", str(config), "--console", "plain", "--interval", "0.3"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout is not None
        deadline, frames = time.monotonic() + 90, 0
        while frames < 10 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if match := re.search(r"live running (\d+)f", line):
                frames = int(match.group(1))
        assert frames >= 10, "the live run produced no frames"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err and f"{sig.name}: finishing the streams" in out
    summary = re.search(r"^live\s+stopped\s+(\d+)", out, re.MULTILINE)
    assert summary, out
    mp4 = tmp_path / "live.mp4"
    assert decoded_frames(mp4) == int(summary.group(1)) >= 10
    found = subprocess.run(["gst-discoverer-1.0", str(mp4)], capture_output=True, text=True, timeout=60,
                           check=False).stdout
    assert "video #" in found and "H.264" in found, found


def test_metrics_port_in_use_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _cli("run", str(_config(tmp_path, str(tmp_path / "{id}.mp4"))), "--metrics-port", str(port))
    assert done.returncode == 1
    assert done.stderr.strip() == (f"inferstream: --metrics-port {port}: cannot listen on 127.0.0.1:{port}: "
                                   "Address already in use; choose another port (0: any free one)")


def test_uncreatable_sink_folder_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    done = _cli("run", str(_config(tmp_path, str(tmp_path / "a-file" / "sub" / "{id}.mp4"))))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("inferstream: stream live: cannot create the folder ")
    assert "Not a directory; fix sink.path" in lines[0]


def test_print_pipeline_shows_no_password(tmp_path: Path) -> None:
    messages = {"conv": {"schema": "inferstream-frame"},
                "broker": {"proto": "mqtt", "conn-str": "mqtt://user:s3cret-pw@127.0.0.1:1883"}}
    done = _cli("run", str(_config(tmp_path, str(tmp_path / "{id}.mp4"), messages=messages)), "--print-pipeline")
    assert done.returncode == 0, done.stderr
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert "conn-str=mqtt://user:***@127.0.0.1:1883" in done.stdout
    assert "INFERSTREAM_BROKER_PASSWORD" in done.stderr  # how to pass it to gst-launch instead


def test_exit_codes_are_documented_in_help_and_readme() -> None:
    text = _cli("--help").stdout
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    for code in ("0 done", "1 a stream failed", "2 invalid config", "3 events lost", "70 internal error",
                 "130 Ctrl-C", "143 SIGTERM", "129 SIGHUP"):
        assert code in " ".join(text.split()), code
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 70 |", "| 130 |", "| 143 |", "| 129 |"):
        assert code in readme, code
