"""``inferstream run --cluster``, run for real: a two-node Ray cluster on loopback (``ray.cluster_utils.Cluster``,
one CPU per node, so two workers land on two nodes), the CLI as a subprocess joining it as a driver. Every frame
of every source once across the actors, the actors on both nodes, a SIGKILLed actor restarted, SIGTERM finishing
every actor's MP4, and the bad inputs (a CUDA config on a CPU-only cluster, an address nobody answers at, Ray
missing) as one line each before anything starts."""
from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.media import BLOBS, CLIP_FRAMES, decoded_frames
from inferstream.app.cluster import Node, Placement, check_cluster, file_outputs
from inferstream.app.config import load_config
from inferstream.app.runner import RunError
from app.test_workers import LIVE, _config, _frames, _metrics, _summary, _wait_frames

ray_cluster_utils = pytest.importorskip("ray.cluster_utils", reason="cluster mode needs Ray (the cluster extra)")

CLI = [sys.executable, "-m", "inferstream.app.cli", "run"]
HOST = "127.0.0.2"  # loopback, but not one Ray rewrites to the machine's outward address (it does 127.0.0.1)
NODE = {"num_cpus": 1, "object_store_memory": 78 * 1024 * 1024, "node_ip_address": HOST}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """Two Ray nodes on this machine, one CPU each; yields the head's (GCS) address."""
    temp = tempfile.mkdtemp(prefix="is-ray-", dir="/tmp")  # short: Ray's socket paths live under it
    made = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
        **NODE, "include_dashboard": False, "temp_dir": temp})
    try:
        made.add_node(**NODE)
        yield made.address
    finally:
        made.shutdown()
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


def test_zz_show(cluster: str, clips: list[Path], tmp_path: Path) -> None:
    cfg = {"sources": [{"id": f"cam{i}", "file": str(p)} for i, p in enumerate(clips)], "infer": BLOBS,
           "messages": {"conv": {"schema": "inferstream-frame", "frame-interval": 1, "skip-empty": False},
                        "broker": {"proto": "file", "conn-str": str(tmp_path / "{id}.jsonl")}}}
    run = _run(_config(tmp_path, cfg), "--cluster", cluster, "--metrics-port", "0")
    print(run.stdout, run.stderr)
    assert 0
