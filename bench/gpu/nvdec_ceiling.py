#!/usr/bin/env python3
"""What NVDEC alone decodes of the runs' clips: the decoder's ceiling, beside the model's.

    python bench/gpu/nvdec_ceiling.py CLIP [CLIP ...] [--streams 64] [--processes 8]

The app's streams decode ``filesrc ! parsebin ! nvh264dec`` into CUDA memory; here the same decoding ends in a
fakesink, spread over ``--processes`` processes as the app's workers are (one process's streaming threads and
GStreamer's per-buffer work would bound it otherwise). Each process prerolls its streams, waits for a start time
shared by all, plays to EOS and says when it ended: frames/s = the frames after preroll / (last end - start),
and NVDEC's utilisation over that time (NVML). With the model compiled, the app's runs reached NVDEC's 100 %
(BENCHMARKS.md, *Twenty-fourth session*): this says how close to the decoder's own rate they are.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Nvml, Sampler

START_AFTER_S = 8.0  # every process has prerolled by then (CUDA contexts, the decoders' first frames)


def child(clips: list[str], start_at: float) -> dict[str, Any]:
    """Decode ``clips`` (one stream each) in this process from ``start_at`` (time.time()) to EOS."""
    Gst.init(None)
    desc = " ".join(f"filesrc location={c} ! parsebin ! nvh264dec ! video/x-raw(memory:CUDAMemory) ! "
                    f"fakesink name=s{i} sync=false" for i, c in enumerate(clips))
    pipe = Gst.parse_launch(desc)
    counts = [0] * len(clips)
    for i in range(len(clips)):
        def count(_pad: Gst.Pad, _info: Gst.PadProbeInfo, k: int = i) -> Gst.PadProbeReturn:
            counts[k] += 1
            return Gst.PadProbeReturn.OK
        pipe.get_by_name(f"s{i}").get_static_pad("sink").add_probe(Gst.PadProbeType.BUFFER, count)
    bus = pipe.get_bus()
    pipe.set_state(Gst.State.PAUSED)
    ok = pipe.get_state(60 * Gst.SECOND)[0] == Gst.StateChangeReturn.SUCCESS
    prerolled = sum(counts)
    time.sleep(max(0.0, start_at - time.time()))
    pipe.set_state(Gst.State.PLAYING)
    msg = bus.timed_pop_filtered(120 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    ended = time.time()
    error = msg.parse_error()[0].message if msg is not None and msg.type == Gst.MessageType.ERROR else None
    pipe.set_state(Gst.State.NULL)
    return {"frames": sum(counts), "prerolled": prerolled, "ended": ended, "late_start": not ok,
            "error": error or (None if msg is not None else "no EOS in 120 s")}


def nvdec_ceiling(clips: list[Path], streams: int = 64, processes: int = 8) -> dict[str, Any]:
    """Frames/s NVDEC decodes of ``streams`` streams over ``clips`` (round robin), in ``processes`` processes."""
    start_at = time.time() + START_AFTER_S
    paths = [str(clips[i % len(clips)]) for i in range(streams)]
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "--start-at", str(start_at), *paths[p::processes]],
                              stdout=subprocess.PIPE, text=True) for p in range(processes)]
    sampler = Sampler(Nvml())
    time.sleep(max(0.0, start_at - time.time()))
    with sampler:
        results = [json.loads(proc.communicate(timeout=180)[0].strip().splitlines()[-1]) for proc in procs]
    frames = sum(r["frames"] - r["prerolled"] for r in results)  # the prerolled ones were decoded before the start
    seconds = max(r["ended"] for r in results) - start_at
    util = [(g, d) for _, g, d in sampler.util]
    return {"fps": round(frames / seconds, 1), "frames": frames, "seconds": round(seconds, 2),
            "streams": streams, "processes": processes,
            "nvdec_util_pct": round(statistics.mean(d for _, d in util), 1) if util else None,
            "gpu_util_pct": round(statistics.mean(g for g, _ in util), 1) if util else None,
            "errors": [r["error"] for r in results if r["error"]]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clips", nargs="+")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.clips, args.start_at)), flush=True)
        return 0
    print(json.dumps(nvdec_ceiling([Path(c) for c in args.clips], args.streams, args.processes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
