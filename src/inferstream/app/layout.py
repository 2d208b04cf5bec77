"""How many worker processes a run gets, and for ``workers: auto`` on CUDA the layout around them.

Every rule here comes from runs of the app on the H200 host (``BENCHMARKS.md``): the constants are where those
runs put them.
"""
from __future__ import annotations

import os
from typing import Final

from inferstream.app.config import AppConfig
from inferstream.errors import ConfigError

MAX_AUTO_CUDA: Final = 8  # more contexts than this only shrank the batches on the GPU host (BENCHMARKS.md)
CORES_PER_CUDA_WORKER: Final = 4  # 4 workers beat 8 on the 16-core H200 host (BENCHMARKS.md, *Worker processes*)
# with a model server 8 beat 4 there, and 16 gave no more (BENCHMARKS.md, *Model server on the H200*)
CORES_PER_SERVED_WORKER: Final = 2
AUTO_IN_FLIGHT: Final = 2  # with a model server, two batches per worker in flight beat one on every host measured


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def auto_workers(cfg: AppConfig, cores: int | None = None) -> int:
    """``workers: auto``: on CUDA min(sources, 8, cores // 4), or cores // 2 with a model server; on CPU 1.

    On the 16-core GPU host, 64 streams ran fastest as 4 processes, each with two batches in flight (the default
    batch, ``pipeline.default_batch``); 8 processes, each with one batch in flight, were slower. With a model
    server the workers hold no model and their batches share forwards, so 8 were faster than 4. On CPU the model's
    thread pool already uses every core (``BENCHMARKS.md``, *Worker processes*).
    """
    if not cfg.infer.device.startswith("cuda"):
        return 1
    return cuda_workers(len(cfg.sources), cores or cpu_cores(), served=cfg.infer.model_server is not None)


def cuda_workers(sources: int, cores: int, served: bool = False) -> int:
    """``auto_workers``' rule on CUDA, for ``sources`` sources on ``cores`` cores (``served``: with a model
    server)."""
    per_worker = CORES_PER_SERVED_WORKER if served else CORES_PER_CUDA_WORKER
    return max(1, min(sources, MAX_AUTO_CUDA, cores // per_worker))


def worker_count(asked: int | str | None, cfg: AppConfig, hooks: bool = False,
                 cores: int | None = None) -> tuple[int, str | None]:
    """How many workers to run for ``asked`` (N, ``auto``; None: the config's) on ``cores`` cores (None: this
    machine's), and what to say about it.

    Raises:
        ConfigError: ``asked`` is neither a whole number >= 1 nor auto; frame hooks (``hooks``) with more than one
            worker: they would see none of the frames.
    """
    asked = cfg.workers if asked is None else asked
    if asked != "auto" and (type(asked) is not int or asked < 1):
        raise ConfigError(f"workers: expected a whole number of at least 1, or auto (got {asked!r})")
    n_sources = len(cfg.sources)
    note = None
    if asked == "auto":
        cores = cores or cpu_cores()
        n = auto_workers(cfg, cores)
        served = "" if cfg.infer.model_server is None else \
            f", one model server for all, in-flight {cfg.infer.properties.get('in-flight', 1)}"
        note = (f"workers: auto -> {n} ({n_sources} sources, device {cfg.infer.device}, "
                f"{cores} cores{served})" if n > 1 else None)
    elif (n := int(asked)) > n_sources:  # int() for mypy: asked is an int here
        n, note = n_sources, f"workers: {n} asked for {n_sources} source(s): running {n_sources}, one per source"
    if n > 1 and hooks:
        raise ConfigError(f"frame hooks run in this process and see none of the frames of {n} worker processes: "
                          "run with workers=1")
    return n, note


def auto_layout(cfg: AppConfig, asked: int | str | None, cores: int | None = None) -> AppConfig:
    """``cfg`` as ``workers: auto`` runs it (``asked``: the ``--workers`` option; None: the config's).

    On CUDA, where ``auto`` gives two workers or more, that is the layout measured fastest on every host it ran on:
    one model server for the workers (their batches share forwards) and pyinfer's ``in-flight: 2`` (whole batches,
    the next forming while one is at the server; ``BENCHMARKS.md``, *Model server on the H200*, *Twelfth
    session*). A config that sets ``model-server`` (``false`` included) or ``in-flight`` keeps its own; a remote or
    served model, several ``instances``, the CPU and a fixed worker count keep the config as it is.
    """
    asked = cfg.workers if asked is None else asked
    infer = cfg.infer
    model = str(infer.properties.get("model", ""))
    if (asked != "auto" or not infer.device.startswith("cuda") or "model_server" in infer.model_fields_set
            or infer.instances != 1 or "://" in model
            or cuda_workers(len(cfg.sources), cores or cpu_cores(), served=True) < 2):
        return cfg
    props = infer.properties
    props.setdefault("in-flight", AUTO_IN_FLIGHT)
    laid_out = type(infer).model_validate({**props, "model-server": {}, "instances": infer.instances,
                                          "secondary": infer.secondary})
    return cfg.model_copy(update={"infer": laid_out})
