"""``inferstream run CONFIG --cluster ADDRESS``: the workers of ``--workers`` as Ray actors on a cluster's nodes.

Ray does placement (resources per worker: CPUs, GPUs when ``infer.device`` is cuda; ``SPREAD`` over the nodes),
liveness (a dead actor's calls fail) and transport (actor calls); the supervisor is the one of ``app/workers.py``
(same shards, console, endpoint, restarts, signals), with actors instead of processes (``app/clusterproc.py``).
Everything that can be checked before an actor starts is checked here, each failure one line: Ray missing, an
address nothing (or nothing Ray) answers at, a CUDA config on a cluster without a GPU node, more workers than the
cluster has room for, file outputs on a cluster of several hosts.
"""
from __future__ import annotations

import logging
import math
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from inferstream.app.config import AppConfig, Cluster
from inferstream.app.layout import worker_count
from inferstream.app.runner import RunError
from inferstream.errors import ConfigError

if TYPE_CHECKING:
    from inferstream.app.console import Console
    from inferstream.app.runner import RunResult

INSTALL_HINT: Final = "pip install 'inferstream[cluster]'"
PROBE_TIMEOUT_S: Final = 5.0
CLIENT_INIT_ATTEMPTS: Final = 2


@dataclass(frozen=True, slots=True)
class Node:
    """An alive node of the cluster and what it offers (Ray's resources)."""

    id: str
    host: str
    cpus: float
    gpus: float


@dataclass(frozen=True, slots=True)
class Placement:
    """What each worker asks the cluster for, and how long it may wait to get it."""

    cpus: float
    gpus: float
    shared_storage: bool
    place_timeout_s: float

    def slots(self, node: Node) -> int:
        """How many workers fit on ``node`` at once."""
        fits = [math.floor(have / need + 1e-9) for have, need in ((node.cpus, self.cpus), (node.gpus, self.gpus))
                if need > 0]
        return min(fits) if fits else 1 << 30

    def describe(self) -> str:
        return f"{self.cpus:g} CPU" + (f" + {self.gpus:g} GPU" if self.gpus else "")


def cluster_address(asked: str | None, cfg: AppConfig) -> str | None:
    """The cluster to run on: ``--cluster`` (``asked``), else the config's ``cluster.address``; None: run here."""
    return asked or (cfg.cluster.address if cfg.cluster is not None else None)


def placement(cfg: AppConfig) -> Placement:
    """Resources per worker: ``cluster.gpus-per-worker`` defaults to 1 when ``infer.device`` is cuda."""
    section = cfg.cluster or Cluster.model_validate({})
    gpus = section.gpus_per_worker
    if gpus is None:
        gpus = 1.0 if cfg.infer.device.startswith("cuda") else 0.0
    return Placement(section.cpus_per_worker, gpus, section.shared_storage, section.place_timeout)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RunError(f"cluster mode needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def connect(address: str, debug: bool = False) -> list[Node]:
    """Join the cluster at ``address`` as its driver and list its alive nodes.

    Raises:
        RunError: Ray is not installed; nothing answers at ``address``, or nothing that speaks Ray; Ray refuses.
    """
    ray = import_ray()
    target = _auto_address() if address == "auto" else address
    if target is not None:
        _probe(address, target)
    for attempt in range(CLIENT_INIT_ATTEMPTS):
        try:  # log_to_driver: the actors' own stderr (C-level GStreamer output) only with --debug
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=debug)
            break
        except ConnectionAbortedError as exc:
            # Ray Client's proxy answers a busy start of the client's own server with an empty Init failure; it
            # is transient (seen on a loaded 2-core machine): one more try, then the error
            if attempt + 1 == CLIENT_INIT_ATTEMPTS:
                raise RunError(f"cannot join the Ray cluster at {address}: {_first_line(exc)} (tried "
                               f"{CLIENT_INIT_ATTEMPTS} times)") from None
            ray.shutdown()
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RunError(f"cannot join the Ray cluster at {address}: {_first_line(exc)}") from None
    return [Node(n["NodeID"], n["NodeManagerAddress"], float(n["Resources"].get("CPU", 0)),
                 float(n["Resources"].get("GPU", 0))) for n in ray.nodes() if n.get("Alive")]


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _auto_address() -> str | None:
    """Where ``auto`` points (RAY_ADDRESS, or the cluster ``ray start`` made on this machine), to probe it first;
    None when this Ray has no public way to tell (``ray.init`` then says it)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return None
    try:
        return canonicalize_bootstrap_address("auto")
    except (ConnectionError, ValueError):
        raise RunError("--cluster auto: no Ray cluster found (none started here with `ray start --head`, and no "
                       "RAY_ADDRESS): give its address, HOST:PORT or ray://HOST:PORT") from None


def _probe(address: str, target: str) -> None:
    """Ray's own connect retries for minutes and then aborts the process: a TCP connect and a gRPC handshake
    (GCS and Ray Client both speak gRPC) first, each bounded, make a wrong address one line."""
    host, _, port = target.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"cluster address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise RunError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None
    try:
        import grpc  # type: ignore[import-untyped]  # ray[client]'s; a bare ray has only the TCP check
    except ImportError:
        return
    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=PROBE_TIMEOUT_S)
    except grpc.FutureTimeoutError:
        raise RunError(f"{address} answers, but not as a Ray cluster: give the head's address as `ray start --head` "
                       "prints it (HOST:6379), or ray://HOST:10001 for Ray Client") from None
    finally:
        channel.close()


def cluster_workers(asked: int | str | None, cfg: AppConfig, nodes: Sequence[Node],
                    place: Placement) -> tuple[int, str | None]:
    """How many workers (actors) to run and what to say about it. Without ``--workers`` or ``workers:``, and for
    ``auto``: one per GPU slot with a GPU config (min(sources, slots)), else one per node (each node's cores
    serve its worker's model, as ``auto`` gives one process on one CPU host)."""
    if asked is None:
        asked = cfg.workers if "workers" in cfg.model_fields_set else "auto"
    if asked != "auto":
        return worker_count(asked, cfg)
    useful = [n for n in nodes if place.slots(n) > 0]
    room = sum(place.slots(n) for n in useful) if place.gpus else len(useful)
    n = max(1, min(len(cfg.sources), room))
    return n, f"workers: auto -> {n} ({len(cfg.sources)} sources, {len(nodes)} node(s), room for {room} worker(s))"


def check_cluster(cfg: AppConfig, nodes: Sequence[Node], place: Placement, n: int, address: str) -> None:
    """What would make the run fail or hang once started, said before any actor starts.

    Raises:
        RunError: no node with the GPU a CUDA config needs; less room than ``n`` workers; file outputs on a
            cluster whose nodes are on other hosts (without ``shared-storage``).
    """
    if place.gpus and not any(n.gpus >= place.gpus for n in nodes):
        raise RunError(f"infer.device is {cfg.infer.device} but the Ray cluster at {address} has no node with a GPU "
                       f"({len(nodes)} node(s), CPU only): add a GPU node, or set infer.device: cpu")
    room = sum(place.slots(node) for node in nodes)
    if room < n:
        raise RunError(f"{n} workers of {place.describe()} each do not fit on the Ray cluster at {address} (room for "
                       f"{room} on its {len(nodes)} node(s)): use --workers {max(room, 1)}, or change "
                       "cluster.cpus-per-worker / gpus-per-worker")
    outputs = file_outputs(cfg)
    hosts = sorted({node.host for node in nodes})
    if outputs and not place.shared_storage and not all(map(_local_address, hosts)):
        raise RunError(f"{' and '.join(outputs)} write(s) files on the node that runs each stream, and the Ray "
                       f"cluster at {address} has nodes on other hosts ({', '.join(hosts)}): send events to a broker "
                       "(kafka, mqtt, redis, amqp) and drop the file outputs, or set cluster.shared-storage: true "
                       "when every node sees the config's paths (NFS)")


def file_outputs(cfg: AppConfig) -> list[str]:
    """The config's outputs that are files written where the stream runs."""
    broker = cfg.messages.broker if cfg.messages is not None else {}
    return [what for what, on in (("sink.type file", cfg.sink.type == "file"),
                                  ("messages.broker proto=file", str(broker.get("proto", "")) == "file")) if on]


def _local_address(host: str) -> bool:
    """Whether ``host`` is an address of this machine (it can be bound here)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


def _check_device(cfg: AppConfig) -> None:
    if cfg.infer.model_server is not None:
        raise ConfigError("infer.model-server serves the workers of one machine over a local socket; a cluster's "
                          "workers cannot reach it: leave it out for a cluster run (each actor loads the model)")
    device = cfg.infer.device
    if device.startswith("cuda:") and device != "cuda:0":
        raise ConfigError(f"infer.device {device}: on a cluster Ray gives each worker its GPU (CUDA_VISIBLE_DEVICES), "
                          "which the worker sees as cuda:0: write infer.device: cuda")


def run_cluster(cfg: AppConfig, address: str, asked: int | str | None, make_console: Callable[[], Console],
                metrics_port: int | None = None, eos_timeout_s: float = 10.0, debug: bool = False) -> RunResult:
    """Run a validated config over Ray actors on the cluster at ``address`` (``asked``: ``--workers``); the
    console is made once the checks passed (a live table would be left behind by a one-line refusal)."""
    from inferstream.app.clusterproc import ClusterSupervisor

    _check_device(cfg)
    nodes = connect(address, debug)
    try:
        place = placement(cfg)
        n, note = cluster_workers(asked, cfg, nodes, place)
        check_cluster(cfg, nodes, place, n, address)
        console = make_console()
        if note:
            console.message(note)
        return ClusterSupervisor(cfg, n, console, metrics_port, eos_timeout_s, place, address, len(nodes)).run()
    finally:
        import_ray().shutdown()
