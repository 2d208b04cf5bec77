"""The supervisor of ``--workers`` with Ray actors for processes: :class:`ActorProcess` gives an actor
(``app/clusterworker.py``) the face of a ``subprocess.Popen`` (pid, poll, send_signal, kill) and relays its reports
to the supervisor's inbox; :class:`ClusterSupervisor` starts one per shard and names their nodes.

Liveness is Ray's: an actor whose process or node dies fails its pending calls with ``RayActorError``, which ends
the relay as a pipe closing ends a worker process's; the supervisor then restarts it (a new actor, placed by Ray)
or fails its streams, within ``worker-restarts``. Ray's own restarts are off (``max_restarts=0``): one policy.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from inferstream.app.workers import Supervisor, _Worker

if TYPE_CHECKING:
    from inferstream.app.cluster import Placement
    from inferstream.app.config import AppConfig
    from inferstream.app.console import Console

REPORT_WAIT_S: Final = 0.25  # how long one take() waits for a report: the relay's poll period when all is quiet
MAX_CONCURRENCY: Final = 4  # run, take, interrupt overlap in the actor
NODE_ID_CHARS: Final = 12

Report = Callable[[dict[str, Any] | None], None]


class ActorProcess:
    """One worker as a Ray actor running its shard; ``poll()`` is None until its relay ended (0: it reported its
    exit, else it died: ``cause`` says how)."""

    def __init__(self, actor_class: Any, options: Mapping[str, Any], args: Sequence[Any], report: Report,
                 place_timeout_s: float) -> None:
        self.pid = 0  # the actor's process, once it said ready
        self.node = ""
        self.cause = ""
        self._rc: int | None = None
        self._report, self._place_timeout_s = report, place_timeout_s
        self._actor = actor_class.options(**options).remote()
        self._run = self._actor.run.remote(*args)
        threading.Thread(target=self._relay, daemon=True, name="actor-relay").start()

    def poll(self) -> int | None:
        return self._rc

    def send_signal(self, sig: int) -> None:
        """SIGKILL kills the actor; any other stop signal is a Ctrl-C for its run (as a worker's SIGINT)."""
        if sig == signal.SIGKILL:
            self.kill()
        else:
            with contextlib.suppress(Exception):  # a gone actor's relay reports its end anyway
                self._actor.interrupt.remote()

    def kill(self) -> None:
        import ray

        with contextlib.suppress(Exception):  # an actor already gone, or a cluster gone with it: nothing to kill
            ray.kill(self._actor, no_restart=True)

    def _relay(self) -> None:
        from ray.exceptions import RayActorError

        try:
            rc = self._pump()
        except RayActorError as exc:
            self.cause, rc = f"Ray actor{self._who()} ended: {death_cause(exc)}", -1
        except Exception as exc:  # noqa: BLE001 (the cluster is gone, say: the relay must still report the end)
            self.cause, rc = f"Ray actor{self._who()} unreachable: {type(exc).__name__}: {_last_line(str(exc))}", -1
        if rc >= 0:  # done (or never placed): give its resources back, before the run may end and disconnect
            self.kill()
        self._rc = rc
        self._report(None)

    def _who(self) -> str:
        return f" pid {self.pid} on node {self.node}" if self.pid else ""

    def _pump(self) -> int:
        """Relay reports until the run's ``exit``; raises RayActorError when the actor dies.

        An empty ``take`` says nothing of what the run queued after it gave up: a run seen to have returned gets
        one more ``take`` (all it queued before returning is there), and only without an ``exit`` in it did the
        run end without one. Deciding at once lost the last snapshot and the ``exit`` of a run that returned in
        between: a healthy worker "died" with "exited with code 1" (CI, on a busy 2-core machine).
        """
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        timeout: float | None = self._place_timeout_s  # the first call waits for the actor to be placed
        returned = False  # the run has returned: the next take is the last
        while True:
            try:
                now, items = ray.get(self._actor.take.remote(0.0 if returned else REPORT_WAIT_S), timeout=timeout)
            except GetTimeoutError:
                self._report({"fatal": f"the Ray cluster did not place it within {self._place_timeout_s:g} s (its "
                                       "resources are taken; cluster.place-timeout)"})
                return 1
            timeout = None
            offset = time.monotonic() - now  # this host's clock minus the node's (plus the call's latency)
            for item in items:
                if "at" in item:
                    item["at"] = float(item["at"]) + offset
                if "ready" in item:
                    self.pid, self.node = int(item["ready"]), str(item.get("node", ""))[:NODE_ID_CHARS]
                self._report(item)
            if any("exit" in item for item in items):
                return 0
            if not returned and not items and ray.wait([self._run], timeout=0)[0]:
                returned = True  # take what it queued before returning
            elif returned:
                try:  # the run returned without its exit report: it raised
                    ray.get(self._run)
                except RayActorError:
                    raise
                except Exception as exc:  # noqa: BLE001 (a bug in the worker: its last line, as a process's stderr)
                    self.cause = f"Ray actor{self._who()} failed: {_last_line(str(exc))}"
                return 1


def death_cause(exc: BaseException) -> str:
    """Ray's long death notice as a clause: why the actor died (and the worker's exit type)."""
    text = str(exc)
    if found := re.search(r"The actor is dead because (.+?)\.(?:\s|$)", text, re.DOTALL):
        kind = re.search(r"Worker exit type: (\w+)", text)
        return found.group(1).strip() + (f" ({kind.group(1)})" if kind else "")
    if "creation task" in text:
        return f"its creation failed: {_last_line(text)}"
    return _last_line(text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no reason given"


class ClusterSupervisor(Supervisor):
    """:class:`Supervisor` over Ray actors: each shard runs in an actor that asks for ``place``'s resources."""

    def __init__(self, cfg: AppConfig, n_workers: int, console: Console, metrics_port: int | None,
                 eos_timeout_s: float, place: Placement, address: str, n_nodes: int) -> None:
        import ray

        from inferstream.app.clusterworker import ClusterWorker

        super().__init__(cfg, n_workers, console, metrics_port, eos_timeout_s)
        self.place, self.address, self.n_nodes = place, address, n_nodes
        self._config = cfg.model_dump(by_alias=True, exclude_unset=True)
        self._actor_class = ray.remote(ClusterWorker)
        self._options = {"num_cpus": place.cpus, "num_gpus": place.gpus, "max_concurrency": MAX_CONCURRENCY,
                         "max_restarts": 0, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}

    def _launch(self, w: _Worker) -> ActorProcess:
        generation = w.generation

        def report(item: dict[str, Any] | None) -> None:
            self.inbox.put((w.index, generation, item))
        args = (self._config, list(w.shard), self.eos_timeout_s, os.getcwd())
        return ActorProcess(self._actor_class, self._options, args, report, self.place.place_timeout_s)

    def _started_line(self) -> str:
        return (f"workers: {len(self.workers)} Ray actor(s) of {self.place.describe()} on the cluster at "
                f"{self.address} ({self.n_nodes} node(s)): " + "; ".join(w.name for w in self.workers))

    def _handle(self, index: int, generation: int, item: dict[str, Any] | None) -> None:
        w = self.workers[index]
        if item is not None and "ready" in item and generation == w.generation:
            w.node = str(item.get("node", ""))[:NODE_ID_CHARS] or None
            self.say(f"{w.name}: node {w.node} ({item.get('host', '?')}) pid {item['ready']}")
        super()._handle(index, generation, item)

    def _exit_cause(self, w: _Worker, rc: int) -> str:
        return w.proc.cause if isinstance(w.proc, ActorProcess) and w.proc.cause else super()._exit_cause(w, rc)
