"""``inferstream run --cluster``, run for real: a two-node Ray cluster on loopback (``ray.cluster_utils.Cluster``,
one CPU per node, so two workers land on two nodes), the CLI as a subprocess joining it as a driver (through the
head's address, and through Ray Client), and ``inferstream.run(cluster=...)`` in this process. Every frame of every
source once across the actors, the actors on both nodes, a SIGKILLed actor restarted or its streams failed,
SIGTERM finishing every actor's MP4, per-node metric labels, a worker the cluster cannot place, and the bad inputs
(a CUDA config on a CPU-only cluster, an address nobody or no Ray answers at, Ray missing) as one line each before
anything starts; the checks and the auto rule on their own with node tables."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.media import BLOBS, CLIP_FRAMES
from app.test_workers import LIVE, _config, _summary, _wait_frames, assert_finished_by_sigterm
from inferstream.app import api
from inferstream.app.cluster import Node, Placement, check_cluster, cluster_workers, file_outputs
from inferstream.app.config import load_config
from inferstream.app.runner import RunError
from inferstream.errors import ConfigError

ray_cluster_utils = pytest.importorskip("ray.cluster_utils", reason="cluster mode needs Ray (the cluster extra)")

CLI = [sys.executable, "-m", "inferstream.app.cli", "run"]
HOST = "127.0.0.2"  # loopback, but not one Ray rewrites to the machine's outward address (it does 127.0.0.1)
NODE = {"num_cpus": 1, "object_store_memory": 78 * 1024 * 1024, "node_ip_address": HOST}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """Two Ray nodes on this machine, one CPU each; yields the head's (GCS) address."""
    # Ray's files (sessions, sockets, the "current cluster" note) in a folder of ours, not /tmp/ray: short, since
    # Ray's socket paths live under it; the runs started here (drivers, Ray Client) inherit it
    temp, before = tempfile.mkdtemp(prefix="is-ray-", dir="/tmp"), os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # the head would report usage to Ray's servers: nothing leaves here
    made = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        made.add_node(**NODE)
        yield made.address
    finally:
        made.shutdown()
        os.environ.pop("RAY_USAGE_STATS_ENABLED")
        if before is None:
            os.environ.pop("RAY_TMPDIR")
        else:
            os.environ["RAY_TMPDIR"] = before
        shutil.rmtree(temp, ignore_errors=True)


def _placed(out: str) -> dict[int, list[tuple[str, int]]]:
    """``worker 0 (cam0, cam1): node ab12 (127.0.0.2) pid 123`` lines -> {worker: [(node, pid), ...]}."""
    found: dict[int, list[tuple[str, int]]] = {}
    for w, node, pid in re.findall(r"worker (\d+) \([^)]*\): node (\w+) \([^)]*\) pid (\d+)", out):
        found.setdefault(int(w), []).append((node, int(pid)))
    return found


def _run(config: Path, *extra: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, str(config), "--console", "plain", *extra], check=False, capture_output=True,
                          text=True, timeout=timeout)


def test_cluster_two_actors_on_two_nodes_publish_every_frame_once_in_order(cluster: str, clips: list[Path],
                                                                           tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "file": str(p)} for i, p in enumerate(clips)], "infer": BLOBS,
           "messages": {"conv": {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False},
                        "broker": {"proto": "file", "conn-str": str(tmp_path / "{id}.jsonl")}}}
    run = _run(_config(tmp_path, cfg), "--cluster", cluster, "--workers", "2")
    assert run.returncode == 0, run.stderr
    placed = _placed(run.stdout)
    assert placed.keys() == {0, 1} and placed[0][0][0] != placed[1][0][0], run.stdout  # one actor per node
    assert f"2 Ray actor(s) of 1 CPU on the cluster at {cluster} (2 node(s))" in run.stdout
    assert "worker 0 (cam0, cam1)" in run.stdout and "worker 1 (cam2, cam3)" in run.stdout  # the local shards
    assert _summary(run.stdout) == {f"cam{i}": ("done", n) for i, n in enumerate(CLIP_FRAMES)}
    node0, node1 = placed[0][0][0], placed[1][0][0]
    assert f"workers: worker 0 (cam0, cam1) on node {node0} ok; worker 1 (cam2, cam3) on node {node1} ok" in run.stdout
    for i, n in enumerate(CLIP_FRAMES):
        payloads = [yaml.safe_load(line) for line in (tmp_path / f"cam{i}.jsonl").read_text().splitlines()]
        assert [p["frame"] for p in payloads] == list(range(n))  # each frame once, in order
        assert {p["stream_id"] for p in payloads} == {f"cam{i}"}



@contextlib.contextmanager
def _running(config: Path, cluster: str, workers: int) -> Iterator[tuple[subprocess.Popen[str], dict[int, int], str]]:
    """The run, each worker's actor pid and its metrics URL (read from its first lines); killed if left running."""
    proc = subprocess.Popen([*CLI, str(config), "--console", "plain", "--interval", "0.5", "--metrics-port", "0",
                             "--cluster", cluster, "--workers", str(workers)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        head: list[str] = []
        while len(_placed("".join(head))) < workers or not any(ln.startswith("metrics: ") for ln in head):
            line = proc.stdout.readline()
            assert line, f"the run ended before its workers were placed: {''.join(head)}"
            head.append(line)
        url = next(ln.split()[-1] for ln in head if ln.startswith("metrics: "))
        yield proc, {w: placed[-1][1] for w, placed in _placed("".join(head)).items()}, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("restarts", [0, 1])
def test_cluster_sigkilled_actor_is_restarted_or_its_streams_failed(cluster: str, tmp_path: Path,
                                                                     restarts: int) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 60, **LIVE} for i in range(4)],
           "infer": BLOBS, "worker-restarts": restarts}
    with _running(_config(tmp_path, cfg), cluster, 2) as (proc, pids, url):
        _wait_frames(url, ["cam2", "cam3"], 5)
        os.kill(pids[1], signal.SIGKILL)  # the actor's own process, on its node
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)  # an actor died: the exit code says so, restarted or not
    died = f"worker 1 (cam2, cam3) died: Ray actor pid {pids[1]} on node "
    assert died in err and "ended: its worker process has died" in err, err
    summary = _summary(out)
    assert summary["cam0"] == summary["cam1"] == ("done", 60), (out, err)  # the other actor went on
    assert re.search(rf"worker 1 \(cam2, cam3\) on node \w+ died 1x, restarted {restarts}x", err), err
    if restarts:
        assert "restarting its streams from the start (restart 1 of 1)" in err
        (_, new_pid), = _placed(out)[1]  # the lines after the first placements: worker 1 placed again
        assert new_pid != pids[1]  # in a new actor
        assert summary["cam2"] == summary["cam3"] == ("done", 60)
    else:
        assert "no restarts left" in err
        assert summary["cam2"][0] == summary["cam3"][0] == "failed"


def test_cluster_relay_takes_what_a_run_queued_after_an_empty_take(cluster: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """CI: a take came back empty, the run then queued its last snapshot and exit and returned, and the relay,
    seeing it returned, took a healthy worker for dead (its streams failed at 54 of 60 frames, "exited with code
    1"). ray.wait is held here until the run has returned: that window opens on every run."""
    import ray

    from inferstream.app.clusterproc import ActorProcess
    from inferstream.app.clusterworker import ClusterWorker

    class LateRun(ClusterWorker):
        def run(self, delay_s: float, fail: bool) -> int:  # type: ignore[override]
            time.sleep(delay_s)  # the first take (0.25 s) comes back empty
            if fail:
                raise RuntimeError("a bug in the run")
            self._console.send(snapshot="last")
            self._console.send(exit=0)
            return 0

    real_wait = ray.wait

    def wait_for_the_run(refs: list[Any], timeout: float | None = None, **kw: Any) -> Any:
        real_wait(refs, timeout=None)
        return real_wait(refs, timeout=timeout, **kw)

    ray.init(address=cluster, logging_level=logging.ERROR, log_to_driver=False)
    monkeypatch.setattr(ray, "wait", wait_for_the_run)
    try:
        for fail in (False, True):
            got: list[dict[str, Any] | None] = []
            proc = ActorProcess(ray.remote(LateRun), {"num_cpus": 0, "max_concurrency": 4}, (1.0, fail), got.append,
                                60)
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if fail:  # still a run that raised: no exit, and why
                assert proc.poll() == 1 and "a bug in the run" in proc.cause and got == [None], (proc.cause, got)
            else:
                assert proc.poll() == 0 and got == [{"snapshot": "last"}, {"exit": 0}, None], (proc.cause, got)
    finally:
        ray.shutdown()


def test_cluster_sigterm_finishes_every_mp4_of_every_actor(cluster: str, tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 3000, **LIVE} for i in range(4)],
           "infer": BLOBS, "sink": {"type": "file", "path": str(tmp_path / "{id}.mp4")}}
    with _running(_config(tmp_path, cfg), cluster, 2) as (proc, _, url):
        text = _wait_frames(url, [f"cam{i}" for i in range(4)], 10)
        nodes = dict(re.findall(r'^inferstream_worker_up\{worker="(\d)",node="(\w+)"\} 1$', text, re.MULTILINE))
        assert nodes.keys() == {"0", "1"} and nodes["0"] != nodes["1"], text  # each node's worker, labelled
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
    assert_finished_by_sigterm(proc.returncode, out, err, tmp_path, 4)  # every actor finished its MP4s


def test_cluster_auto_joins_the_cluster_ray_address_names(cluster: str, tmp_path: Path) -> None:
    cfg = {"sources": [{"id": "cam0", "test": "ball", "num-buffers": 3, "width": 160, "height": 120}], "infer": BLOBS,
           "cluster": {}}  # the section alone: address auto
    run = subprocess.run([*CLI, str(_config(tmp_path, cfg)), "--console", "plain"], check=False, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "RAY_ADDRESS": cluster})
    assert run.returncode == 0, run.stderr
    assert "on the cluster at auto (2 node(s))" in run.stdout and _summary(run.stdout) == {"cam0": ("done", 3)}
    assert "workers: auto -> 1 (1 sources, 2 node(s), room for 2 worker(s))" in run.stdout  # one per node, 1 source


def test_cluster_cuda_config_on_a_cpu_only_cluster_fails_before_it_starts(cluster: str, tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 3} for i in range(2)],
           "infer": {**BLOBS, "device": "cuda"}}
    run = _run(_config(tmp_path, cfg), "--cluster", cluster, timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        (f"inferstream: infer.device is cuda but the Ray cluster at {cluster} has no node with a GPU (2 node(s), CPU "
         "only): add a GPU node, or set infer.device: cpu")]
    assert "workers:" not in run.stdout  # no actor was started


def test_cluster_address_nobody_answers_at_is_one_line(tmp_path: Path) -> None:
    cfg = {"sources": [{"test": "ball", "num-buffers": 3}], "infer": BLOBS}
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # closed again: nothing listens there
    run = _run(_config(tmp_path, cfg), "--cluster", f"127.0.0.1:{port}", timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        f"inferstream: cannot reach the Ray cluster at 127.0.0.1:{port}: Connection refused"]


def test_cluster_address_of_something_else_is_one_line(tmp_path: Path) -> None:
    cfg = {"sources": [{"test": "ball", "num-buffers": 3}], "infer": BLOBS, "cluster": {"address": "to be replaced"}}
    with socket.socket() as other:  # accepts connections, never speaks gRPC
        other.bind(("127.0.0.1", 0))
        other.listen()
        address = f"127.0.0.1:{other.getsockname()[1]}"
        cfg["cluster"] = {"address": address}  # the config's way, without --cluster
        run = _run(_config(tmp_path, cfg), timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        (f"inferstream: {address} answers, but not as a Ray cluster: give the head's address as `ray start --head` "
         "prints it (HOST:6379), or ray://HOST:10001 for Ray Client")]


def test_cluster_without_ray_installed_says_which_extra(tmp_path: Path) -> None:
    cfg = {"sources": [{"test": "ball", "num-buffers": 3}], "infer": BLOBS}
    code = ("import sys; sys.modules['ray'] = None; from inferstream.app.cli import main; "  # None: import fails
            f"sys.exit(main(['run', {str(_config(tmp_path, cfg))!r}, '--cluster', 'auto']))")
    run = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        "inferstream: cluster mode needs Ray, which is not installed: pip install 'inferstream[cluster]'"]


def _nodes(*hosts: str, gpus: float = 0.0) -> list[Node]:
    return [Node(f"{i:056x}", host, 1.0, gpus) for i, host in enumerate(hosts)]


def test_check_cluster_refuses_file_outputs_across_hosts_unless_storage_is_shared() -> None:
    cfg = load_config({"sources": [{"test": "ball"}] * 2, "infer": BLOBS, "sink": {"type": "file"},
                       "messages": {"broker": {"proto": "file", "conn-str": "/tmp/{id}.jsonl"}}})
    assert file_outputs(cfg) == ["sink.type file", "messages.broker proto=file"]
    remote = _nodes("127.0.0.2", "192.0.2.77")  # TEST-NET-1: an address of no interface here
    with pytest.raises(RunError, match=r"sink.type file and messages.broker proto=file write\(s\) files on the "
                       r"node .* has nodes on other hosts \(127.0.0.2, 192.0.2.77\): send events to a broker"):
        check_cluster(cfg, remote, Placement(1, 0, False, 60), 2, "h:6379")
    check_cluster(cfg, remote, Placement(1, 0, True, 60), 2, "h:6379")  # shared-storage: said to be fine
    check_cluster(cfg, _nodes("127.0.0.2", "127.0.0.3"), Placement(1, 0, False, 60), 2, "h:6379")  # one host


def test_check_cluster_refuses_more_workers_than_room_and_counts_gpu_slots() -> None:
    cfg = load_config({"sources": [{"test": "ball"}] * 8, "infer": BLOBS})
    with pytest.raises(RunError, match=r"3 workers of 1 CPU each do not fit on the Ray cluster at h:6379 \(room "
                       r"for 2 on its 2 node\(s\)\): use --workers 2"):
        check_cluster(cfg, _nodes("127.0.0.2", "127.0.0.2"), Placement(1, 0, False, 60), 3, "h:6379")
    quarter = Placement(0.25, 0.25, False, 60)  # four workers share each GPU
    assert quarter.slots(_nodes("127.0.0.2", gpus=2)[0]) == 4  # 1 CPU: four quarters
    check_cluster(cfg, _nodes("127.0.0.2", "127.0.0.2", gpus=1), quarter, 8, "h:6379")


def test_cluster_from_python_runs_every_frame_and_refuses_frame_hooks(cluster: str) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 4 + i, "width": 160, "height": 120}
                       for i in range(2)], "infer": BLOBS}
    result = api.run(cfg, cluster=cluster, workers=2)  # this process is the driver, as the CLI's is
    assert result.exit_code == 0 and result.frames == {"cam0": 4, "cam1": 5}
    with pytest.raises(ConfigError, match="frame hooks run in this process and see none of the frames of a "
                                          "cluster's workers"):
        api.run(cfg, cluster=cluster, frame_hooks=[lambda *_: None])


def test_cluster_worker_the_cluster_cannot_place_fails_the_run_fast(cluster: str, tmp_path: Path) -> None:
    holder = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR')\n"
              "@ray.remote(num_cpus=1)\nclass Hold:\n    def ping(self): return 1\n"
              "h = Hold.remote(); ray.get(h.ping.remote()); print('held', flush=True); sys.stdin.read()")
    hold = subprocess.Popen([sys.executable, "-c", holder, cluster], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)  # another job takes one of the two CPUs
    try:
        assert hold.stdout is not None and hold.stdout.readline().strip() == "held"
        cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 3000, **LIVE} for i in range(2)],
               "infer": BLOBS, "cluster": {"place-timeout": 3}}
        run = _run(_config(tmp_path, cfg), "--cluster", cluster, "--workers", "2", timeout=120)
    finally:
        hold.communicate("", timeout=30)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert re.search(r"worker \d \(cam\d\) failed: the Ray cluster did not place it within 3 s \(its resources are "
                     r"taken; cluster.place-timeout\): its streams failed", run.stderr), run.stderr
    assert "stopping the other workers" in run.stderr


def test_cluster_through_ray_client_runs_every_frame(cluster: str, tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind((HOST, 0))
        port = free.getsockname()[1]
    log = tmp_path / "client-server.log"
    server = subprocess.Popen([sys.executable, "-m", "ray.util.client.server", "--address", cluster, "--host", HOST,
                               "--port", str(port), "--mode", "proxy"], stdout=subprocess.DEVNULL,
                              stderr=log.open("w"))  # what `ray start --head` runs on port 10001
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex((HOST, port)) == 0:
                    break
            time.sleep(0.2)
        cfg = {"sources": [{"id": f"cam{i}", "test": "ball", "num-buffers": 5, "width": 160, "height": 120}
                           for i in range(2)], "infer": BLOBS}
        run = _run(_config(tmp_path, cfg), "--cluster", f"ray://{HOST}:{port}", "--workers", "2", timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert run.returncode == 0, run.stderr + log.read_text()[-3000:]
    assert _placed(run.stdout).keys() == {0, 1}
    assert _summary(run.stdout) == {"cam0": ("done", 5), "cam1": ("done", 5)}


def test_cluster_workers_auto_is_one_per_node_on_cpu_and_one_per_gpu_slot_on_cuda() -> None:
    def cfg(n: int, **extra: Any) -> Any:
        return load_config({"sources": [{"test": "ball"}] * n, "infer": BLOBS, **extra})
    cpu, halves = Placement(1, 0, False, 60), Placement(1, 0.5, False, 60)
    big = [Node("a" * 56, "127.0.0.2", 8.0, 1.0), Node("b" * 56, "127.0.0.2", 8.0, 2.0)]
    assert cluster_workers(None, cfg(8), big, cpu)[0] == 2  # no workers given: auto, one per node on CPU
    assert cluster_workers(None, cfg(8), big, halves)[0] == 6  # two workers per GPU, three GPUs
    assert cluster_workers(None, cfg(3), big, halves)[0] == 3  # never more than the sources
    assert cluster_workers(None, cfg(8, workers="auto"), big, halves)[0] == 6  # the config's auto: the cluster's
    assert cluster_workers(None, cfg(8, workers=3), big, cpu) == (3, None)  # the config's number
    assert cluster_workers(4, cfg(8, workers=3), big, cpu) == (4, None)  # --workers wins
