"""``infer.model-server``: the run's model in one server process shared by the workers, run for real (the CLI, worker
processes, the server, a real person detector on vtest). The reference is the same config in one process: every
frame of every stream gets the same detections and track ids, once and in order; a model the server cannot load
fails the run in one line."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.media import BLOBS
from inferstream.app.config import load_config
from inferstream.app.serving import served_config, server_command
from inferstream.errors import ConfigError

pytestmark = pytest.mark.pipeline

CLI = [sys.executable, "-m", "inferstream.app.cli", "run"]
LENGTHS = (5, 6, 7, 8)  # frames per stream: a stream mix-up shows as a wrong count


def _config(vtest: Path, person_pt: Path, out: Path, **extra: Any) -> dict[str, Any]:
    return {"sources": [{"id": f"cam{i}", "file": str(vtest), "max-frames": n} for i, n in enumerate(LENGTHS)],
            "decode": "software",
            "infer": {"model": str(person_pt), "trust-checkpoint": True,
                      "confidence-threshold": 0.3, **extra},
            "tracker": {},
            "messages": {"conv": {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False},
                         "broker": {"proto": "file", "conn-str": str(out / "{id}.jsonl")}}}


def _run(cfg: dict[str, Any], folder: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    folder.mkdir()
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = subprocess.run([*CLI, str(path), "--console", "plain", *args], capture_output=True, text=True,
                         timeout=600, check=False)
    events = {f"cam{i}": [yaml.safe_load(line) for line in (folder / f"cam{i}.jsonl").read_text().splitlines()]
              for i in range(len(LENGTHS)) if (folder / f"cam{i}.jsonl").exists()}
    return run, events


def _objects(payload: dict[str, Any]) -> list[tuple[str, Any, list[float]]]:
    return sorted((o["label"], -1 if o["track_id"] is None else o["track_id"], o["bbox"]) for o in payload["objects"])


@pytest.fixture(scope="module")
def alone_events(vtest: Path, person_pt: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The reference: the same config in one process, no server (run once for the module)."""
    folder = tmp_path_factory.mktemp("alone") / "run"
    alone, events = _run(_config(vtest, person_pt, folder), folder)
    assert alone.returncode == 0, alone.stderr
    return events


# in-flight 2: a worker's next batch is formed while its last one is at the server (the GPU benchmark's runs)
@pytest.mark.parametrize("in_flight", [1, 2])
def test_two_workers_on_one_model_server_detect_and_track_every_frame_as_one_process(
        vtest: Path, person_pt: Path, tmp_path: Path, alone_events: dict[str, Any], in_flight: int) -> None:
    served, served_events = _run(_config(vtest, person_pt, tmp_path / "served", **{"model-server": {},
                                                                                     "in-flight": in_flight}),
                                 tmp_path / "served", "--workers", "2")
    assert served.returncode == 0, served.stderr
    assert "workers: worker 0 (cam0, cam1) ok; worker 1 (cam2, cam3) ok" in served.stdout
    assert "model server: " in served.stdout and " forwards (" in served.stdout
    for i, n in enumerate(LENGTHS):
        sid = f"cam{i}"
        assert [p["frame"] for p in served_events[sid]] == list(range(n))  # each frame once, in order
        assert {p["stream_id"] for p in served_events[sid]} == {sid}
        people = 0
        for got, want in zip(served_events[sid], alone_events[sid], strict=True):
            mine, reference = _objects(got), _objects(want)
            assert [(label, track) for label, track, _ in mine] == [(label, track) for label, track, _ in reference]
            for (_, _, box), (_, _, ref_box) in zip(mine, reference):
                assert max(abs(a - b) for a, b in zip(box, ref_box)) < 0.5, (sid, got["frame"], box, ref_box)
            people += len(mine)
        assert people >= 2 * n  # vtest has people in every frame: the detector really ran


def test_a_model_the_server_cannot_load_fails_the_run_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not an onnx model")
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 30} for i in range(2)],
           "infer": {"model": str(bad), "model-server": {}}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run = subprocess.run([*CLI, str(path), "--workers", "2", "--console", "plain"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert f"model server: cannot load {bad}" in run.stderr
    assert "worker 0" not in run.stdout  # no worker was started


def _start_live(tmp_path: Path, buffers: int, *args: str, restarts: int | None = None, messages: bool = False,
                new_session: bool = False, server: dict[str, Any] | None = None) -> subprocess.Popen[str]:
    """``inferstream run --workers 2`` (``args`` may say otherwise) of two live smpte streams (20 fps) through a
    model server (``server``: its options)."""
    live = {"test": "smpte", "num-buffers": buffers, "live": True, "framerate": 20, "width": 160, "height": 120}
    cfg: dict[str, Any] = {"sources": [{"id": f"cam{i}", **live} for i in range(2)],
                           "infer": {**BLOBS, "model-server": server or {}}}
    if restarts is not None:
        cfg["worker-restarts"] = restarts
    if messages:
        cfg["messages"] = {"conv": {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False},
                           "broker": {"proto": "file", "conn-str": str(tmp_path / "{id}.jsonl")}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.Popen([*CLI, str(path), "--workers", "2", "--console", "plain", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=new_session)


def _until_frames_flow(proc: subprocess.Popen[str]) -> list[str]:
    """The console lines up to the first one that shows frames through the server on both streams (each worker
    starts on its own clock: one stream may still be connecting when the other's frames flow)."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if all(re.search(rf"{sid} running [1-9]\d*f", line) for sid in ("cam0", "cam1")):
            break
    return seen


def _server_pid(app: int) -> int:
    return next(p for p in _children(app) if b"inferstream.model_server" in _cmdline(p))


def _kill_the_server_mid_run(tmp_path: Path, restarts: int, frames: int) -> tuple[int, str, str]:
    """A run whose server is SIGKILLed once frames flow: (exit code, console, stderr)."""
    proc = _start_live(tmp_path, frames, "--interval", "0.5", restarts=restarts, messages=True)
    try:
        seen = _until_frames_flow(proc)
        os.kill(_server_pid(proc.pid), signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(seen) + out, err


def _events(tmp_path: Path, sid: str) -> list[dict[str, Any]]:
    return [yaml.safe_load(line) for line in (tmp_path / f"{sid}.jsonl").read_text().splitlines()]


def test_a_model_server_killed_mid_run_is_started_again_and_no_frame_is_lost(tmp_path: Path) -> None:
    rc, out, err = _kill_the_server_mid_run(tmp_path, restarts=1, frames=160)
    assert rc == 0 and "Traceback" not in err, (out, err)
    assert "model server killed by SIGKILL during the run: starting it again" in out
    for sid in ("cam0", "cam1"):
        assert re.search(rf"^{sid}\s+done\s+160\b", out, re.MULTILINE), out
        payloads = _events(tmp_path, sid)
        assert [p["frame"] for p in payloads] == list(range(160))  # each frame once, in order
        assert all(len(p["objects"]) == 3 for p in payloads)  # every frame inferred, before and after the restart


def test_a_model_server_killed_with_no_restarts_left_fails_the_streams_with_why(tmp_path: Path) -> None:
    rc, out, err = _kill_the_server_mid_run(tmp_path, restarts=0, frames=2000)
    assert rc == 1 and "Traceback" not in err
    assert "model server killed by SIGKILL during the run, no restarts left" in out
    for sid in ("cam0", "cam1"):
        pattern = rf"^{sid}\s+failed .*the model server at .*model.sock closed the connection"
        assert re.search(pattern, out, re.MULTILINE), out


def test_ctrl_c_in_the_terminal_finishes_every_stream_before_the_server_stops(tmp_path: Path) -> None:
    """A terminal's Ctrl-C goes to the whole foreground process group: the server must not stop before the workers'
    last batches (it has a session of its own, and the app stops it after the workers)."""
    proc = _start_live(tmp_path, 2000, "--interval", "0.5", messages=True, new_session=True)
    try:
        seen = _until_frames_flow(proc)
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(seen) + out
    assert proc.returncode == 130 and "Traceback" not in err, (out, err)
    assert "during the run" not in out  # the server was not stopped under the workers
    for sid in ("cam0", "cam1"):
        payloads = _events(tmp_path, sid)
        assert payloads and [p["frame"] for p in payloads] == list(range(len(payloads)))
        assert all(len(p["objects"]) == 3 for p in payloads)  # every frame accepted was inferred


def test_the_model_server_does_not_outlive_a_killed_app(tmp_path: Path) -> None:
    proc = _start_live(tmp_path, 2000, "--interval", "0.5")
    try:
        _until_frames_flow(proc)
        server = _server_pid(proc.pid)
        proc.kill()
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 20
        while b"inferstream.model_server" in _cmdline_or_empty(server):
            assert time.monotonic() < deadline, "the model server outlived the app"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("priority", ["normal", "workers-below-normal"])
def test_workers_below_normal_start_every_worker_as_a_below_normal_mps_client_and_the_server_normal(
        tmp_path: Path, priority: str) -> None:
    """What the app controls: the variable NVIDIA's MPS reads when a process's CUDA starts (that MPS then runs the
    server's forwards first is the driver's part, not checked here: no GPU in CI)."""
    proc = _start_live(tmp_path, 2000, "--interval", "0.5", server={"mps-priority": priority})
    try:
        _until_frames_flow(proc)
        children = _children(proc.pid)
        workers = [p for p in children if b"inferstream.app.worker" in _cmdline(p)]
        assert len(workers) == 2, children
        envs = [dict(e.split(b"=", 1) for e in Path(f"/proc/{p}/environ").read_bytes().split(b"\0") if b"=" in e)
                for p in workers]
        want = b"1" if priority == "workers-below-normal" else None
        assert [e.get(b"CUDA_MPS_CLIENT_PRIORITY") for e in envs] == [want, want]
        assert b"--mps-priority\0normal\0" in _cmdline(_server_pid(proc.pid))  # the server itself stays normal
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, 130, 143) and "Traceback" not in err, (out, err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("workers", [1, 2])  # one worker: the run's own process, the server beside it
def test_the_model_server_shows_in_the_runs_metrics(tmp_path: Path, workers: int) -> None:
    import urllib.request

    started = time.monotonic()
    proc = _start_live(tmp_path, 400, "--metrics-port", "0", "--workers", str(workers))
    try:
        assert proc.stdout is not None
        url = next(line.split()[-1] for line in proc.stdout if line.startswith("metrics: "))
        deadline, text, found = time.monotonic() + 60, "", {}
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url, timeout=5) as reply:
                text = reply.read().decode()
            found = dict(re.findall(r"^inferstream_(model_server_\w+) (\S+)$", text, re.MULTILINE))
            if float(found.get("model_server_frames_total", 0)) >= 40 and found.get("model_server_workers") == str(workers):
                break
            time.sleep(0.3)
        assert found["model_server_up"] == "1" and found["model_server_restarts_total"] == "0", text
        assert float(found["model_server_forwards_total"]) >= 20 and found["model_server_workers"] == str(workers), text
        # time in forwards: some, and never more than the run has lasted (one forward at a time)
        busy = float(found["model_server_busy_seconds_total"])
        assert 0 < busy < time.monotonic() - started, text
        # the device's own time for those forwards: on the CPU the same time
        assert 0 < float(found["model_server_device_seconds_total"]) <= busy, text
        # every forward answers one request or more; each request was at the server for its whole forward at least
        assert float(found["model_server_requests_total"]) >= float(found["model_server_forwards_total"]), text
        assert float(found["model_server_request_seconds_total"]) >= busy, text
        # the person detector's rows are decoded at the server (at most one call a forward: tests/backends)
        assert float(found["model_server_decodes_total"]) > 0, text
        assert float(found["model_server_decode_seconds_total"]) > 0, text
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert re.search(r"per forward, a request \d+\.\d ms at the server\)", out), out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _cmdline_or_empty(pid: int) -> bytes:
    try:
        return _cmdline(pid)
    except OSError:
        return b""


def test_workers_get_the_socket_and_the_server_gets_the_model_options(person_pt: Path) -> None:
    cfg = load_config({"sources": [{"test": "smpte"}] * 2,
                       "infer": {"model": str(person_pt), "device": "cuda", "precision": "fp16", "graph": "off",
                                 "trust-checkpoint": True, "confidence-threshold": 0.4,
                                 "model-server": {"max-batch": 16, "delay-ms": 1.5,
                                                  "capture": "every-sum", "mps-priority": "below-normal"}}})
    command = server_command(cfg, Path("/run/x/model.sock"))
    assert command[1:] == ["-m", "inferstream.model_server", "--listen", "/run/x/model.sock", "--die-with-parent",
                           "--max-batch", "16", "--delay-ms", "1.5", "--capture", "every-sum",
                           "--mps-priority", "below-normal", "--model", str(person_pt), "--device", "cuda", "--precision", "fp16",
                           "--graph", "off", "--trust-checkpoint"]
    worker = served_config(cfg, Path("/run/x/model.sock")).infer
    assert worker.properties == {"model": "ipc:///run/x/model.sock", "device": "cuda", "confidence-threshold": 0.4}
    assert worker.model_server is None  # a worker starts no server of its own
    off = load_config({"sources": [{"test": "smpte"}], "infer": {"model": str(person_pt), "model-server": False}})
    assert off.infer.model_server is None
    on = load_config({"sources": [{"test": "smpte"}], "infer": {"model": str(person_pt), "model-server": True}})
    assert on.infer.model_server is not None and on.infer.model_server.max_batch == 32
    assert (on.infer.model_server.capture, on.infer.model_server.mps_priority) == ("powers-of-two", "normal")
    below = load_config({"sources": [{"test": "smpte"}], "infer": {"model": str(person_pt), "model-server": {
        "mps-priority": "workers-below-normal"}}})
    command = server_command(below, Path("/s"))
    assert command[command.index("--mps-priority") + 1] == "normal"  # the workers go below normal, not the server
    with pytest.raises(ConfigError, match="mps-priority"):
        load_config({"sources": [{"test": "smpte"}], "infer": {"model": str(person_pt),
                                                               "model-server": {"mps-priority": "high"}}})


def test_a_cluster_run_with_a_model_server_is_refused_before_it_starts() -> None:
    from inferstream.app.cluster import run_cluster

    cfg = load_config({"sources": [{"test": "smpte"}] * 2, "infer": {**BLOBS, "model-server": {}}})
    with pytest.raises(ConfigError, match="model-server serves the workers of one machine"):
        run_cluster(cfg, "127.0.0.1:1", 2, lambda: pytest.fail("no console before the checks"))
