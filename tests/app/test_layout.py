"""``workers: auto`` on CUDA brings the layout measured fastest on the H200 (a model server, two batches in flight,
whole batches), and only where the config leaves it to ``auto``; the workers' pipelines then equal those of a
config that asks for that layout itself."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.media import BLOBS
from inferstream.app.config import AppConfig, load_config
from inferstream.app.layout import auto_layout, worker_count
from inferstream.app.pipeline import build_plan, launch_line
from inferstream.app.serving import served_config
from inferstream.app.workers import shards


def _cfg(n: int = 64, workers: int | str = "auto", **infer: Any) -> AppConfig:
    return load_config({"sources": [{"test": "ball"}] * n, "workers": workers,
                        "infer": {**BLOBS, "device": "cuda", **infer}})


def _shard_line(cfg: AppConfig, workers: int) -> str:
    """The launch line of the first worker's shard, its pyinfer pointed at a model server's socket."""
    shard = shards(len(cfg.sources), workers)[0]
    part = cfg.model_copy(update={"sources": [cfg.sources[i] for i in shard]})
    return launch_line(build_plan(served_config(part, Path("/run/s.sock"))))


def test_auto_on_cuda_runs_a_model_server_with_two_batches_in_flight() -> None:
    cfg = auto_layout(_cfg(), None, cores=16)
    assert cfg.infer.model_server is not None and cfg.infer.properties["in-flight"] == 2
    assert worker_count(None, cfg, cores=16)[0] == 8  # cores / 2 with a server: 8 workers x 8 streams on a 16-core host
    explicit = _cfg(workers=8, **{"model-server": {}, "in-flight": 2})
    assert cfg.infer == explicit.infer
    line = _shard_line(cfg, 8)
    assert line == _shard_line(explicit, 8)
    assert "model=ipc:///run/s.sock" in line and "in-flight=2" in line and line.count("batch-size=8") == 8


@pytest.mark.parametrize(("workers", "cores", "infer"), [
    ("auto", 16, {"model-server": False}),  # the config said no server
    ("auto", 16, {"model-server": {"max-batch": 64}}),  # its own server options
    ("auto", 16, {"instances": 2}),  # several batch-groups per worker: tuned by hand
    ("auto", 16, {"model": "grpc://127.0.0.1:8001/yolo"}),  # a remote model has its own server
    ("auto", 2, {}),  # one worker: nothing to share a server with
    (4, 16, {}),  # a fixed worker count keeps the config's layout
])
def test_auto_keeps_the_config_where_it_chose_or_nothing_is_shared(workers: int | str, cores: int,
                                                                   infer: dict[str, Any]) -> None:
    cfg = _cfg(workers=workers, **infer)
    assert auto_layout(cfg, None, cores=cores) is cfg


def test_auto_keeps_an_in_flight_the_config_sets_and_the_cpu_keeps_one_process() -> None:
    cfg = auto_layout(_cfg(in_flight=1), None, cores=16)
    assert cfg.infer.model_server is not None and cfg.infer.properties == _cfg(in_flight=1).infer.properties
    cpu = load_config({"sources": [{"test": "ball"}] * 8, "workers": "auto", "infer": BLOBS})
    assert auto_layout(cpu, None, cores=64) is cpu and worker_count(None, cpu) == (1, None)
    assert auto_layout(_cfg(workers=1), "auto", cores=16).infer.model_server is not None  # --workers auto wins


def test_the_note_says_the_server_and_in_flight_once() -> None:
    _, note = worker_count(None, auto_layout(_cfg(), None, cores=16), cores=16)
    assert note is not None and note.endswith(", one model server for all, in-flight 2)")
