"""``--workers 2`` (local worker processes) against ``--cluster`` with 2 Ray actors, on this machine, side by side.

    python bench/cluster_cpu.py [--streams 4] [--frames 3000] [--person-frames 40] [--repeats 2] [--only free|person]

The workloads and the measurement are ``workers_cpu.py``'s (the real CLI, frames/s over the active part, wall of
the whole command), the modes alternating. The cluster is the tests' kind: two Ray nodes on this machine
(``ray.cluster_utils.Cluster``, one CPU each, on 127.0.0.2), started once; each ``--cluster`` run joins it as a
driver, so its wall includes joining and placing the actors, not starting the cluster. Host cores are left out:
the actors are the raylets' children, not the command's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from ray.cluster_utils import Cluster
from workers_cpu import ENV, config, run

NODE: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 78 * 1024 * 1024, "node_ip_address": "127.0.0.2"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--frames", type=int, default=3000, help="frames per stream, free workload")
    ap.add_argument("--person-frames", type=int, default=40, help="frames per stream, person workload")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--only", choices=("free", "person"))
    args = ap.parse_args()
    os.environ["PYTHONPATH"] = ENV["PYTHONPATH"]  # the nodes' actors import the free model from bench/ too
    temp = tempfile.mkdtemp(prefix="is-ray-", dir="/tmp")  # Ray's files, not in /tmp/ray; short for its sockets
    os.environ["RAY_TMPDIR"] = temp
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # the head would report usage to Ray's servers
    cluster = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False})
    try:
        cluster.add_node(**NODE)
        # Ray sets OMP_NUM_THREADS to an actor's CPUs (1 here: torch runs one thread in each actor); the third
        # mode gives local workers the same, to tell that apart from the rest of the difference
        modes: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
            "--workers 2": ((), {}), "--cluster, 2 actors": (("--cluster", cluster.address), {}),
            "--workers 2, OMP_NUM_THREADS=1": ((), {"OMP_NUM_THREADS": "1"})}
        print(f"host: {len(os.sched_getaffinity(0))} cores; {args.streams} streams; best of {args.repeats}, the "
              f"modes alternating; cluster: 2 nodes x 1 CPU at {cluster.address}\n")
        print("| workload | mode | frames/s | vs --workers 2 | wall s |")
        print("|---|---|---|---|---|")
        for workload in [args.only] if args.only else ["free", "person"]:
            frames = args.frames if workload == "free" else args.person_frames
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"{workload}.yaml"
                path.write_text(yaml.safe_dump(config(workload, args.streams, frames)))
                best: dict[str, dict[str, float]] = {}
                for _ in range(args.repeats):
                    for mode, (extra, env) in modes.items():
                        r = run(path, 2, extra, env)
                        if mode not in best or r["fps"] > best[mode]["fps"]:
                            best[mode] = r
            base = best["--workers 2"]["fps"]
            for mode in modes:
                r = best[mode]
                print(f"| {workload}, {args.streams} x {frames} frames | {mode} | {r['fps']:.1f} | "
                      f"{r['fps'] / base:.2f}x | {r['wall']:.1f} |", flush=True)
    finally:
        cluster.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    main()
