"""Where the GPU's time goes in one app run: an Nsight Systems trace (``nsys --export sqlite``) summed per process.

    python bench/gpu/kernel_profile.py TRACE.sqlite --frames 19200 [--json OUT.json]

The model server is the process that replays CUDA graphs; every other process that ran kernels is a worker. For
each side: kernels, graph replays, copies and memsets (count, total device ms, device µs per frame) and the
kernels that took the most time; then the union of all device activity (the time the GPU had anything running)
against the sum (the difference is work that ran at the same time, under MPS). A graph replay's mean time, next
to the bare ceiling's replay time on the same frames, is the forward's slowdown from sharing the GPU.
"""
from __future__ import annotations

import argparse
import collections
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

ACTIVITIES = {"kernel": "CUPTI_ACTIVITY_KIND_KERNEL", "graph": "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
              "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY", "memset": "CUPTI_ACTIVITY_KIND_MEMSET"}


def _rows(con: sqlite3.Connection, table: str, extra: str = "") -> list[tuple[Any, ...]]:
    """The table's activities, or none (said on stderr) when the trace has no such table or column."""
    try:
        return con.execute(f"SELECT globalPid, start, end{extra} FROM {table}").fetchall()
    except sqlite3.Error as exc:
        print(f"{table}: {exc}", file=sys.stderr)
        return []


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, -1
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def summarise(path: Path, frames: int) -> dict[str, Any]:
    con = sqlite3.connect(str(path))
    strings = dict(con.execute("SELECT id, value FROM StringIds").fetchall())
    graphs = _rows(con, ACTIVITIES["graph"])
    server_pids = {r[0] for r in graphs}
    side_of = (lambda gpid: "server" if gpid in server_pids else "workers")
    out: dict[str, Any] = {"frames": frames, "server_processes": len(server_pids)}
    every: list[tuple[int, int]] = []
    kernels_by_name: dict[str, collections.Counter[str]] = {"server": collections.Counter(),
                                                             "workers": collections.Counter()}
    counts_by_name: dict[str, collections.Counter[str]] = {"server": collections.Counter(),
                                                            "workers": collections.Counter()}
    for kind, table in ACTIVITIES.items():
        extra = ", shortName" if kind == "kernel" else (", copyKind, bytes" if kind == "memcpy" else "")
        rows = graphs if kind == "graph" else _rows(con, table, extra)
        per: dict[str, list[int]] = {"server": [0, 0], "workers": [0, 0]}
        for row in rows:
            side, ns = side_of(row[0]), row[2] - row[1]
            per[side][0] += 1
            per[side][1] += ns
            every.append((row[1], row[2]))
            if kind == "kernel":
                name = str(strings.get(row[3], row[3]))[:60]
                kernels_by_name[side][name] += ns
                counts_by_name[side][name] += 1
        for side, (n, ns) in per.items():
            out[f"{side}_{kind}"] = {"count": n, "ms": round(ns / 1e6, 1), "us_per_frame": round(ns / 1e3 / frames, 2)}
        if kind == "graph" and per["server"][0]:
            out["graph_mean_ms"] = round(per["server"][1] / per["server"][0] / 1e6, 3)
    for side in ("server", "workers"):
        out[f"{side}_top_kernels"] = [
            {"name": name, "ms": round(ns / 1e6, 1), "count": counts_by_name[side][name],
             "us_per_frame": round(ns / 1e3 / frames, 2)} for name, ns in kernels_by_name[side].most_common(15)]
    if every:
        union = _union_ns(every)
        out["span_s"] = round((max(e for _, e in every) - min(s for s, _ in every)) / 1e9, 2)
        out["busy_union_ms"] = round(union / 1e6, 1)
        out["busy_sum_ms"] = round(sum(e - s for s, e in every) / 1e6, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--frames", type=int, required=True, help="frames the run processed (for per-frame figures)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    summary = summarise(args.trace, args.frames)
    text = json.dumps(summary, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
