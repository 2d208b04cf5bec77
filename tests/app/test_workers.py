"""``inferstream run --workers N``, run for real as a subprocess: every frame of every source once across the
workers, a worker killed with SIGKILL restarted or failed (never lost), SIGTERM finishing every worker's MP4, and
the bad inputs."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.media import BLOBS, CLIP_FRAMES, decoded_frames
from inferstream.app import api
from inferstream.app.config import load_config
from inferstream.app.layout import auto_workers, worker_count
from inferstream.app.workers import shards, worker_environment
from inferstream.app.workerstats import merge_batches
from inferstream.errors import ConfigError

CLI = [sys.executable, "-m", "inferstream.app.cli", "run"]
LIVE = {"live": True, "framerate": 20, "width": 160, "height": 120}


def _config(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _summary(out: str) -> dict[str, tuple[str, int]]:
    """The end-of-run table: stream -> (status, frames)."""
    rows = re.findall(r"^(cam\d)\s+(done|failed|stopped|running|starting)\s+(\d+)", out, re.MULTILINE)
    return {sid: (status, int(n)) for sid, status, n in rows}


def _pids(line: str) -> dict[int, int]:
    """``workers: worker 0 (cam0, cam1) pid 123; ...`` -> {0: 123, ...}"""
    return {int(w): int(p) for w, p in re.findall(r"worker (\d+) \([^)]*\) pid (\d+)", line)}


def _metrics(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.read().decode()
    except OSError:
        return ""


def _frames(text: str) -> dict[str, int]:
    return {sid: int(float(n)) for sid, n in re.findall(r'^inferstream_frames_total\{stream="(\w+)"\} (\S+)$', text,
                                                       re.MULTILINE)}


@contextlib.contextmanager
def _running(config: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], dict[int, int], str]]:
    """The run, the workers' pids and its metrics URL (read from its first two lines); killed if left running."""
    proc = subprocess.Popen([*CLI, str(config), "--console", "plain", "--interval", "0.5", "--metrics-port", "0",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout is not None
        pids, url = _pids(proc.stdout.readline()), proc.stdout.readline().split()[-1]
        assert pids and url.startswith("http://127.0.0.1:"), (pids, url)
        yield proc, pids, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _wait_frames(url: str, streams: list[str], at_least: int) -> str:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        text = _metrics(url)
        if all(_frames(text).get(s, 0) >= at_least for s in streams):
            return text
        time.sleep(0.2)
    raise AssertionError(f"no {at_least} frames on {streams}: {_frames(_metrics(url))}")


def test_workers_two_on_four_sources_publish_every_frame_once_in_order(clips: list[Path], tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "file": str(p)} for i, p in enumerate(clips)], "infer": BLOBS,
           "messages": {"conv": {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False},
                        "broker": {"proto": "file", "conn-str": str(tmp_path / "{id}.jsonl")}}}
    run = subprocess.run([*CLI, str(_config(tmp_path, cfg)), "--workers", "2", "--console", "plain"],
                         check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert _pids(run.stdout.splitlines()[0]).keys() == {0, 1}
    assert "worker 0 (cam0, cam1)" in run.stdout and "worker 1 (cam2, cam3)" in run.stdout  # contiguous shards
    assert _summary(run.stdout) == {f"cam{i}": ("done", n) for i, n in enumerate(CLIP_FRAMES)}
    assert "workers: worker 0 (cam0, cam1) ok; worker 1 (cam2, cam3) ok" in run.stdout
    for i, n in enumerate(CLIP_FRAMES):
        payloads = [yaml.safe_load(line) for line in (tmp_path / f"cam{i}.jsonl").read_text().splitlines()]
        assert [p["frame"] for p in payloads] == list(range(n))  # each frame once, in order
        assert {p["stream_id"] for p in payloads} == {f"cam{i}"}  # the config's id, not the worker's index


@pytest.mark.parametrize("restarts", [0, 1])
def test_workers_sigkilled_worker_is_restarted_or_its_streams_failed(tmp_path: Path, restarts: int) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 60, **LIVE} for i in range(4)],
           "infer": BLOBS, "worker-restarts": restarts}
    with _running(_config(tmp_path, cfg), "--workers", "2") as (proc, pids, url):
        _wait_frames(url, ["cam2", "cam3"], 5)
        os.kill(pids[1], signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err  # a worker died: the exit code says so, restarted or not
    assert "worker 1 (cam2, cam3)" in err and "killed by SIGKILL" in err, err
    summary = _summary(out)
    assert summary["cam0"] == summary["cam1"] == ("done", 60)  # the other worker went on
    assert f"worker 1 (cam2, cam3) died 1x, restarted {restarts}x (killed by SIGKILL)" in err
    if restarts:
        assert "restarting its streams from the start (restart 1 of 1)" in err
        assert summary["cam2"] == summary["cam3"] == ("done", 60)
    else:
        assert "no restarts left" in err
        assert summary["cam2"][0] == summary["cam3"][0] == "failed"
        assert re.search(r"^cam2\s+failed\s+\d+\s+\S+\s+worker 1 died: killed by SIGKILL", out, re.MULTILINE), out


def test_workers_sigterm_finishes_every_mp4_of_every_worker(tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 3000, **LIVE} for i in range(4)],
           "infer": BLOBS, "sink": {"type": "file", "path": str(tmp_path / "{id}.mp4")}}
    with _running(_config(tmp_path, cfg), "--workers", "2") as (proc, _, url):
        text = _wait_frames(url, [f"cam{i}" for i in range(4)], 10)
        assert 'inferstream_worker_up{worker="0"} 1' in text and 'inferstream_worker_up{worker="1"} 1' in text
        assert 'inferstream_stream_worker{stream="cam3"} 1' in text and "inferstream_batch_fill_mean" in text
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    assert_finished_by_sigterm(proc.returncode, out, err, tmp_path, 4)


def assert_finished_by_sigterm(code: int, out: str, err: str, folder: Path, n_streams: int) -> None:
    """A run stopped by SIGTERM: exit 143 (128 + SIGTERM, as one process), every stream stopped after 10 frames or
    more, and each one's MP4 in ``folder`` finished by its worker: it plays to the end."""
    assert code == 143, err
    assert "Traceback" not in err and "finishing the streams of every worker" in out
    summary = _summary(out)
    assert set(summary) == {f"cam{i}" for i in range(n_streams)}
    for sid, (status, frames) in summary.items():
        assert status == "stopped" and frames >= 10
        assert decoded_frames(folder / f"{sid}.mp4") == frames


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie waits for whoever reaps it)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_workers_finish_their_mp4s_when_the_parent_is_killed(tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 3000, **LIVE} for i in range(2)],
           "infer": BLOBS, "sink": {"type": "file", "path": str(tmp_path / "{id}.mp4")}}
    with _running(_config(tmp_path, cfg), "--workers", "2") as (proc, pids, url):
        _wait_frames(url, ["cam0", "cam1"], 10)
        proc.kill()  # SIGKILL: the parent cannot forward anything; the kernel tells the workers (SIGUSR2)
        proc.communicate(timeout=30)
    deadline = time.monotonic() + 60
    while any(map(_alive, pids.values())) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in pids.values() if _alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the orphaned workers did not end"
    info = [(decoded_frames(tmp_path / f"cam{i}.mp4"), (tmp_path / f"cam{i}.mp4").stat().st_size) for i in range(2)]
    assert all(n >= 10 for n, _ in info), info


def test_workers_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 3} for i in range(2)], "infer": BLOBS}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run([*CLI, str(_config(tmp_path, cfg)), "--workers", "2", "--metrics-port", str(port)],
                             check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [f"inferstream: cannot serve metrics on port {port}: Address already in use"]


def test_workers_model_that_cannot_load_fails_the_run_with_its_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not an onnx model")
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 3000, **LIVE} for i in range(2)],
           "infer": {"model": str(bad)}}
    run = subprocess.run([*CLI, str(_config(tmp_path, cfg)), "--workers", "2", "--console", "plain"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert _summary(run.stdout) == {"cam0": ("failed", 0), "cam1": ("failed", 0)}
    assert re.search(r"stream cam\d .*failed: .*broken\.onnx", run.stderr), run.stderr


def test_workers_frame_hooks_need_one_worker(clips: list[Path]) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "file": str(p)} for i, p in enumerate(clips)], "infer": BLOBS}
    with pytest.raises(ConfigError, match="frame hooks run in this process .* of 2 worker processes"):
        api.run(cfg, workers=2, frame_hooks=[lambda *_: None])


def test_workers_zero_is_a_usage_error_in_one_line(tmp_path: Path) -> None:
    cfg = {"sources": [{"test": "ball", "num-buffers": 3}], "infer": BLOBS}
    run = subprocess.run([*CLI, str(_config(tmp_path, cfg)), "--workers", "0"], check=False, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].endswith(
        "argument --workers: expected a whole number of at least 1, or auto (got '0')")


def test_workers_more_than_sources_are_clamped_and_said_once(tmp_path: Path) -> None:
    cfg = {"sources": [{"id": "cam0", "test": "ball", "num-buffers": 3, "width": 160, "height": 120}],
           "infer": BLOBS, "workers": 3}
    run = subprocess.run([*CLI, str(_config(tmp_path, cfg)), "--console", "plain"], check=False, capture_output=True,
                         text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("workers: 3 asked for 1 source(s): running 1, one per source") == 1
    assert _summary(run.stdout) == {"cam0": ("done", 3)}


@pytest.mark.parametrize(("n_sources", "n_workers"), [(s, w) for s in range(1, 12) for w in range(1, min(s, 5) + 1)])
def test_shards_cover_every_source_once_contiguous_and_balanced(n_sources: int, n_workers: int) -> None:
    parts = shards(n_sources, n_workers)
    assert [i for part in parts for i in part] == list(range(n_sources))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1 and all(parts)


def test_worker_count_auto_follows_device_sources_and_cores() -> None:
    def cfg(n: int, device: str | None = None, served: bool = False) -> Any:
        infer = {**BLOBS, **({"device": device} if device else {}), **({"model-server": {}} if served else {})}
        return load_config({"sources": [{"test": "ball"}] * n, "infer": infer})
    assert auto_workers(cfg(4)) == 1  # CPU: the model's threads already use every core
    assert auto_workers(cfg(64, "cuda"), cores=16) == 4  # the best split of 64 streams on the 16-core H200 host
    assert auto_workers(cfg(3, "cuda:0"), cores=16) == 3
    assert auto_workers(cfg(64, "cuda"), cores=6) == 1
    assert auto_workers(cfg(64, "cuda"), cores=64) == 8
    # a model server: the workers hold no model and share forwards, 8 beat 4 on the same host
    assert auto_workers(cfg(64, "cuda", served=True), cores=16) == 8
    assert auto_workers(cfg(64, "cuda", served=True), cores=6) == 3
    assert auto_workers(cfg(4, served=True)) == 1  # CPU, server or not
    assert worker_count(2, cfg(4)) == (2, None)
    assert worker_count(5, cfg(2))[0] == 2
    for bad in (0, -1, "many", 2.5):
        with pytest.raises(ConfigError, match=f"workers: expected a whole number of at least 1, or auto .got {bad!r}"):
            worker_count(bad, cfg(2))  # type: ignore[arg-type]


def test_cpu_workers_get_their_share_of_the_cores_as_threads() -> None:
    def cfg(device: str) -> Any:
        return load_config({"sources": [{"test": "ball"}] * 4, "infer": {**BLOBS, "device": device}})
    assert worker_environment(cfg("cpu"), 2, cores=8, environ={})["OMP_NUM_THREADS"] == "4"
    assert worker_environment(cfg("cpu"), 3, cores=2, environ={})["OMP_NUM_THREADS"] == "1"  # never 0
    assert worker_environment(cfg("cpu"), 2, cores=8, environ={"OMP_NUM_THREADS": "3"})["OMP_NUM_THREADS"] == "3"
    assert "OMP_NUM_THREADS" not in worker_environment(cfg("cuda"), 4, cores=16, environ={})  # host threads only


def test_merge_batches_weights_means_by_what_they_average() -> None:
    a = {"batches": 10, "frames": 40, "mean-fill": 4.0, "mean-wait-ms": 5.0, "mean-infer-ms": 20.0,
         "mean-model-ms": 8.0}
    b = {"batches": 30, "frames": 30, "mean-fill": 1.0, "mean-wait-ms": 1.0, "mean-infer-ms": 10.0,
         "mean-model-ms": 4.0}
    merged = merge_batches([a, b, {}])
    # the same numbers from the raw sums: 70 frames in 40 batches; 40*5 + 30*1 ms of waiting; 10*20 + 30*10 ms;
    # a stage per batch, as the infer time: 10*8 + 30*4 ms
    assert merged == {"batches": 40, "frames": 70, "mean-fill": 1.75, "mean-wait-ms": round(230 / 70, 3),
                      "mean-infer-ms": 12.5, "mean-model-ms": 5.0}
    assert merge_batches([{}, {}]) == {}
