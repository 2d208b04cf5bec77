"""Python entry points mirroring the CLI: ``run`` a config, or get its gst-launch line."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferstream.errors import ConfigError

if TYPE_CHECKING:
    from inferstream.app.runner import RunResult
    from inferstream.app.stream_probes import FrameHook


def run(config: Mapping[str, Any] | str | Path, *, console: str = "quiet", metrics_port: int | None = None,
        eos_timeout_s: float = 10.0, frame_hooks: Sequence[FrameHook] = (), interval_s: float = 2.0,
        workers: int | str | None = None, cluster: str | None = None) -> RunResult:
    """Validate ``config`` (a YAML file path or the same structure as a dict) and run it to the end.

    Args:
        config: path of a YAML config, or its content as a mapping.
        console: ``quiet`` (summary only), ``plain``, ``rich`` or ``auto`` (as ``inferstream run --console``).
        metrics_port: serve Prometheus text on 127.0.0.1:port while running (0: any free port).
        eos_timeout_s: after Ctrl-C (SIGTERM, SIGHUP), how long streams may take to finish their files.
        frame_hooks: ``fn(stream_id, frame_index, buffer)`` called on each frame after the last analytics element.
        interval_s: seconds between two status lines of the plain console.
        workers: worker processes to shard the sources over (N or ``auto``; default: the config's ``workers``).
            Frame hooks see the frames of this process only, so they need one worker.
        cluster: run the workers as Ray actors on the cluster at this address (``HOST:PORT``, ``ray://HOST:PORT``,
            ``auto``; default: the config's ``cluster.address``, else no cluster), as ``--cluster``.

    Returns:
        The RunResult: exit code (0 done, 1 a stream failed, 3 events lost, 128 + N stopped by signal N), per-stream
        counts, errors and event losses, outputs.

    Raises:
        inferstream.app.config.ConfigFileError: the config is invalid (every problem with key path and line).
        inferstream.app.runner.RunError: the pipeline could not be built or failed as a whole.
        inferstream.errors.ConfigError: frame hooks with more than one worker, or on a cluster.
    """
    from inferstream.app.cluster import cluster_address, run_cluster
    from inferstream.app.config import load_config
    from inferstream.app.console import make_console
    from inferstream.app.layout import auto_layout, worker_count
    from inferstream.app.workers import run_config

    cfg = load_config(config)
    address = cluster_address(cluster, cfg)
    if address is not None:
        if frame_hooks:
            raise ConfigError("frame hooks run in this process and see none of the frames of a cluster's workers")
        return run_cluster(cfg, address, workers, lambda: make_console(console, interval_s), metrics_port,
                           eos_timeout_s)
    cfg = auto_layout(cfg, workers)
    count = worker_count(workers, cfg, hooks=bool(frame_hooks))
    return run_config(cfg, count, make_console(console, interval_s), metrics_port, eos_timeout_s, frame_hooks)


def launch_line(config: Mapping[str, Any] | str | Path) -> str:
    """The gst-launch-1.0 command line equivalent to ``config`` (what ``--print-pipeline`` prints)."""
    from inferstream.app.config import load_config
    from inferstream.app.pipeline import build_plan
    from inferstream.app.pipeline import launch_line as line

    return line(build_plan(load_config(config)))
