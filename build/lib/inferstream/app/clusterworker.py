"""One worker of ``inferstream run --cluster``, as a Ray actor on a node: the same shard run as a worker process
(``app/worker.py``), its reports queued for the supervisor to take (``app/cluster.py`` makes it an actor with
``ray.remote``; this module needs Ray only inside the actor).

The supervisor calls ``run`` once (it returns when the shard is done), ``take`` over and over (the reports of the
wire format of ``app/worker.py``: ``ready``, ``snapshot``, ``message``, ``fatal``, ``exit``) and ``interrupt`` for
each Ctrl-C it forwards. The actor is threaded (these calls overlap); its process is Ray's and nothing else's, so
the run may change its working directory.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from queue import Empty, Queue
from typing import TYPE_CHECKING, Any

from inferstream.app.worker import ReportConsole, report_run

if TYPE_CHECKING:
    from inferstream.app.runner import Runner


class ClusterWorker:
    """A shard's run on a cluster node, with the Ctrl-Cs that reach it before and while it runs."""

    def __init__(self) -> None:
        self._items: Queue[dict[str, Any]] = Queue()
        self._console = ReportConsole(self._items.put)
        self._lock = threading.Lock()
        self._runner: Runner | None = None
        self._early = 0

    def run(self, config: Mapping[str, Any], shard: Sequence[int], eos_timeout_s: float, cwd: str) -> int:
        """Plan the shard here (this node's decoders and elements) from the validated config and run it.

        Args:
            config: the driver's validated config as data (``AppConfig.model_dump``): samples already resolved.
            shard: the indices of the sources this worker runs (``workers.shards``).
            eos_timeout_s: after a Ctrl-C, how long the streams may take to finish their files.
            cwd: the driver's working directory: relative paths in the config mean the same here when the node
                has it (the same host, or shared storage).
        """
        import ray

        from inferstream.app.config import load_config
        from inferstream.app.pipeline import build_plan
        from inferstream.app.runner import Runner
        from inferstream.errors import InferstreamError

        self._console.send(ready=os.getpid(), node=ray.get_runtime_context().get_node_id(),
                           host=ray.util.get_node_ip_address())
        if os.path.isdir(cwd):
            os.chdir(cwd)
        else:
            self._console.message(f"node {ray.util.get_node_ip_address()} has no folder {cwd}: relative paths of "
                                  f"the config are taken from {os.getcwd()}", error=True)
        try:
            runner = Runner(build_plan(load_config(config), list(shard)), self._console, None, eos_timeout_s)
        except InferstreamError as exc:
            self._console.send(fatal=str(exc))
            self._console.send(exit=1)
            return 1
        with self._lock:
            self._runner = runner
            for _ in range(self._early):
                runner.interrupt()
        return report_run(runner, self._console)

    def interrupt(self) -> None:
        """A Ctrl-C: the first finishes the streams, a second stops now (also before ``run`` made its runner)."""
        with self._lock:
            if self._runner is None:
                self._early += 1
            else:
                self._runner.interrupt()

    def take(self, wait_s: float) -> tuple[float, list[dict[str, Any]]]:
        """The reports queued since the last call (waiting up to ``wait_s`` for one), and this node's
        ``time.monotonic()`` (the supervisor turns the reports' times into its own clock's)."""
        items: list[dict[str, Any]] = []
        try:
            items.append(self._items.get(timeout=wait_s))
            while True:
                items.append(self._items.get_nowait())
        except Empty:
            pass
        return time.monotonic(), items
