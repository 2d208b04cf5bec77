"""Events the app must not hide, with the app as a subprocess and real brokers: an unreachable broker gives exit 3
and the loss per stream; a wrong password is an error at once; a full spool disk keeps the video going, counts
the drops and tears no record (the next run delivers every record the spool kept)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from messaging.msg_servers import BINARIES, Mosquitto, PasswordRedis
from messaging.msg_subscribers import MqttSubscriber
from ports import free_port

from app.media import BLOBS

FAST_BLOBS = {**BLOBS, "input-size": "160"}
FRAME_MESSAGES = {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False}  # one event per frame


def _run(tmp_path: Path, cfg: dict[str, Any], name: str = "run") -> tuple[subprocess.CompletedProcess[str], float]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "inferstream.app.cli", "run", str(path), "--console", "plain"],
                          capture_output=True, text=True, timeout=180, env=os.environ.copy(), check=False)
    return done, time.monotonic() - t0


def _source(sid: str, frames: int) -> dict[str, Any]:
    return {"id": sid, "test": "smpte", "num-buffers": frames, "width": 160, "height": 120}


def _summary(out: str, sid: str) -> tuple[str, int, str]:
    match = re.search(rf"^{sid}\s+(\w+)\s+(\d+)\s+\S+\s+(.*)$", out, re.MULTILINE)
    assert match, out
    return match.group(1), int(match.group(2)), match.group(3)


def test_unreachable_broker_exits_3_and_counts_the_loss_per_stream(tmp_path: Path) -> None:
    broker = {"proto": "mqtt", "conn-str": f"127.0.0.1;{free_port()}", "flush-timeout": 0.3}
    cfg = {"sources": [_source("a", 12), _source("b", 7)], "infer": FAST_BLOBS,
           "messages": {"conv": FRAME_MESSAGES, "broker": broker}}
    done, _ = _run(tmp_path, cfg)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for sid, n in (("a", 12), ("b", 7)):
        status, frames, note = _summary(done.stdout, sid)
        assert (status, frames) == ("done", n)
        assert note == f"events: {n} lost ({n} undelivered at stop with no spool-dir); 0 delivered"


def test_wrong_redis_password_is_an_error_at_once_not_a_retry(tmp_path: Path) -> None:
    if BINARIES["redis"] is None:
        pytest.skip("redis-server not installed")
    server = PasswordRedis(tmp_path / "redis")
    server.start()
    try:
        broker = {"proto": "redis", "conn-str": f"redis://:wrong-pw@127.0.0.1:{server.port}"}
        cfg = {"sources": [_source("cam", 300)], "infer": FAST_BLOBS,
               "messages": {"conv": FRAME_MESSAGES, "broker": broker}}
        done, wall = _run(tmp_path, cfg)
    finally:
        server.close()
    assert done.returncode == 1, done.stdout + done.stderr
    status, _frames, note = _summary(done.stdout, "cam")
    assert status == "failed" and "refused us" in note and "check the username / password" in note, note
    assert "wrong-pw" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert "retrying" not in done.stdout + done.stderr
    assert wall < 60  # failed at start, not after backing off through 300 frames


def test_full_spool_disk_keeps_frames_flowing_and_tears_no_record(tmp_path: Path, small_fs: Path) -> None:
    """Broker down, spool on a 96 KiB tmpfs: ENOSPC is a warning, drop-oldest applies, all 600 frames run, the
    loss is counted exactly; then the broker comes up and the next run sends every kept record first, whole."""
    if BINARIES["mqtt"] is None:
        pytest.skip("mosquitto not installed")
    server = Mosquitto(tmp_path / "mqtt")  # not started yet: the first run finds no broker
    topic = f"enospc-{uuid.uuid4().hex[:8]}"
    broker = {"proto": "mqtt", "conn-str": f"127.0.0.1;{server.port}", "topic": topic, "flush-timeout": 0.2,
              "spool-dir": str(small_fs / "spool"), "memory-limit": 0, "drop-policy": "drop-oldest"}
    cfg = {"sources": [_source("cam", 600)], "infer": FAST_BLOBS, "messages": {"conv": FRAME_MESSAGES, "broker": broker}}
    done, _ = _run(tmp_path, cfg)
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    assert "Traceback" not in out and "publisher worker stopped" not in out
    assert "spool-write-failed" in out and "No space left on device" in out and "drop-oldest applied" in out
    status, frames, note = _summary(done.stdout, "cam")
    assert (status, frames) == ("done", 600)
    counts = re.fullmatch(r"events: (\d+) lost \((\d+) dropped by drop-policy \(full buffers or spool disk\)\); "
                          r"(\d+) kept in spool-dir for the next run; 0 delivered", note)
    assert counts, note
    lost, dropped, kept = (int(g) for g in counts.groups())
    assert lost == dropped and lost > 0 and kept > 0 and lost + kept == 600
    server.start()
    subscriber = MqttSubscriber(server.port, topic)
    try:
        again = {**cfg, "sources": [_source("cam", 1)]}
        done2, _ = _run(tmp_path, again, "second")
        assert done2.returncode == 0, done2.stdout + done2.stderr
        got = subscriber.wait_for(lambda m: len(m) >= kept + 1, 30)
    finally:
        subscriber.close()
        server.close()
    frames_seen = [json.loads(p)["frame"] for p in got]  # every record parses: none torn
    assert frames_seen == [*range(600 - kept, 600), 0]  # the newest kept (drop-oldest), then the new run's frame
