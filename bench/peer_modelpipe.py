"""pyinfer against modelpipe's ``mp_yolo`` (ultralytics' predictor in a GStreamer element), side by side (CPU).

    python bench/peer_modelpipe.py [--frames 300] [--streams 1 4] [--rounds 2]

Same weights (``inferstream.samples.person_detector('pt')``, YOLOv8s), same frames (``--frames`` of vtest.avi in all,
each of S streams reading the first ``frames / S``: every run does the same work), same thresholds (conf 0.25, IoU 0.45), same pipeline around the element:
``filesrc ! decodebin ! identity eos-after=N ! videoconvert ! RGB ! queue ! ELEMENT ! fakesink``, one branch per
stream. Rows, each in its own process, alternating round by round so that load from others hits them alike:

- pyinfer torch: the .pt as shipped defaults run it (channels_last, the frames' rectangle, on the model's own
  thread: ``inferstream.model_thread``); streams share one batch-group (batch-size = streams).
- pyinfer ONNX: the same ``best.pt`` exported by ultralytics' exporter (``dynamic=True``, fp32; done once by this
  script into ``<cache>/peer/best-dynamic/``, nothing downloaded), ONNX Runtime: it takes the frames' rectangle too.
- pyinfer ONNX fixed: the package's own ``best_fp16.onnx`` (fixed 640x640, fp16 weights behind a float input).
- mp_yolo as shipped: one element per stream; ultralytics' ``select_device`` leaves torch one thread.
- mp_yolo all cores: the same, with torch given every core (set on each streaming thread before its buffer).

modelpipe is installed once into its own folder (``pip install --target <cache>/peer/modelpipe-VERSION --no-deps``,
plus whichever of its requirements the environment lacks, torch never among them: a missing torch is an error),
and only its processes see that folder. frames/s: all streams' buffers out of the element, first ``5 x streams``
left out as warm-up. Results go to bench/results/peer_modelpipe.md.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODELPIPE = "modelpipe==2.0.0"
KINDS = ("pyinfer-torch", "pyinfer-onnx", "pyinfer-onnx-fixed", "mp_yolo", "mp_yolo-all")
NEVER_INSTALLED = {"torch", "torchvision"}  # the environment's own build, never replaced by a peer's pin


def modelpipe_dir() -> Path:
    """modelpipe's own folder (installed on first use); SystemExit with the reason when it cannot be."""
    from inferstream.cache import cache_dir

    target = cache_dir() / "peer" / MODELPIPE.replace("==", "-")
    if (target / "modelpipe" / "plugins" / "python" / "yolo.py").is_file():
        return target
    pip = [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "--no-deps"]
    if (run := subprocess.run([*pip, MODELPIPE], capture_output=True, text=True, check=False)).returncode:
        raise SystemExit(f"cannot install {MODELPIPE}: {run.stderr.strip().splitlines()[-1:]}")
    missing = [req for req in _requirements(target) if not _installed(req)]
    if blocked := [r for r in missing if r in NEVER_INSTALLED]:
        raise SystemExit(f"{MODELPIPE} needs {blocked}, which this environment lacks; not installing a second torch")
    if missing and (run := subprocess.run([*pip, *missing], capture_output=True, text=True, check=False)).returncode:
        raise SystemExit(f"cannot install modelpipe's requirements {missing}: {run.stderr.strip()[-300:]}")
    return target


def onnx_export() -> Path:
    """``best.pt`` as ONNX with dynamic batch, height and width (fp32), exported once by ultralytics' exporter next
    to a copy of the .pt in the cache; SystemExit with the reason when it cannot be. In a process of its own:
    importing ultralytics sets ``OMP_NUM_THREADS=1``, which every row started after it would inherit."""
    import shutil

    from inferstream.cache import cache_dir
    from inferstream.samples import person_detector

    target = cache_dir() / "peer" / "best-dynamic" / "best.onnx"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(person_detector("pt"), target.with_suffix(".pt"))  # the exporter writes beside its input
    code = ("import sys; from ultralytics import YOLO; print(YOLO(sys.argv[1]).export(format='onnx', dynamic=True, "
            "half=False, simplify=False, imgsz=640, device='cpu'))")
    done = subprocess.run([sys.executable, "-c", code, str(target.with_suffix(".pt"))], capture_output=True,
                          text=True, check=False)
    if done.returncode or not target.is_file():
        raise SystemExit(f"ultralytics' exporter failed on {target.with_suffix('.pt')}: {done.stderr[-500:]}")
    return target


def _requirements(target: Path) -> list[str]:
    """modelpipe's unconditional requirements (names only), from its installed METADATA."""
    meta = next(target.glob("modelpipe-*.dist-info")) / "METADATA"
    names = []
    for line in meta.read_text().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            spec, _, marker = line.removeprefix("Requires-Dist:").partition(";")
            if "python_version >= '3.14'" in marker and sys.version_info < (3, 14):
                continue
            names.append(re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0])
    return sorted(set(names))


def _installed(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def child_env(kind: str) -> dict[str, str]:
    """The environment of one row's process: modelpipe's folder and plugins only for mp_yolo rows."""
    env = dict(os.environ)
    if kind.startswith("mp_yolo"):
        target = modelpipe_dir()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
        env["GST_PLUGIN_PATH"] = os.pathsep.join(filter(None, [str(target / "modelpipe" / "plugins"),
                                                               env.get("GST_PLUGIN_PATH")]))
        env["GST_REGISTRY"] = str(target / "registry.bin")  # keep the peer's elements out of our registry
    return env


def element(kind: str, index: int, streams: int) -> str:
    from inferstream.samples import person_detector

    if kind.startswith("pyinfer"):
        model = {"pyinfer-torch": person_detector("pt"), "pyinfer-onnx": onnx_export(),
                 "pyinfer-onnx-fixed": person_detector("onnx")}[kind]
        return (f"pyinfer name=inf{index} model={model} trust-checkpoint=true batch-group=peer "
                f"batch-size={streams}")
    stem = str(person_detector("pt")).removesuffix(".pt")  # mp_yolo appends ".pt" itself
    return f"mp_yolo name=inf{index} model-name={stem} confidence=0.25 nms-iou=0.45"


def run_one(kind: str, streams: int, frames: int) -> dict[str, float]:
    """One row in this process: frames/s over all streams, and the torch threads the element ran with."""
    import gi

    gi.require_version("Gst", "1.0")
    import torch
    from gi.repository import Gst

    from inferstream.samples import vtest_path

    Gst.init(None)
    branches = " ".join(
        f"filesrc location={vtest_path()} ! decodebin ! identity eos-after={frames} ! videoconvert ! "
        f"video/x-raw,format=RGB ! queue max-size-buffers=8 ! {element(kind, i, streams)} ! fakesink sync=false"
        for i in range(streams))
    pipeline = Gst.parse_launch(branches)
    stamps: list[float] = []
    threads: list[int] = []
    cores = os.cpu_count() or 1

    def before(_pad: Gst.Pad, _info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        if kind == "mp_yolo-all" and torch.get_num_threads() != cores:
            torch.set_num_threads(cores)  # ultralytics' select_device set 1; this streaming thread gets them all
        return Gst.PadProbeReturn.OK

    def after(_pad: Gst.Pad, _info: Gst.PadProbeInfo) -> Gst.PadProbeReturn:
        stamps.append(time.perf_counter())
        threads.append(torch.get_num_threads())
        return Gst.PadProbeReturn.OK

    for i in range(streams):
        inf = pipeline.get_by_name(f"inf{i}")
        inf.get_static_pad("sink").add_probe(Gst.PadProbeType.BUFFER, before)
        inf.get_static_pad("src").add_probe(Gst.PadProbeType.BUFFER, after)
    pipeline.set_state(Gst.State.PLAYING)
    msg = pipeline.get_bus().timed_pop_filtered(3600 * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR)
    pipeline.set_state(Gst.State.NULL)
    if msg is None or msg.type == Gst.MessageType.ERROR:
        raise SystemExit(f"{kind}: pipeline failed: {msg.parse_error() if msg else 'timeout'}")
    skip = 5 * streams
    if len(stamps) <= skip + 1:
        raise SystemExit(f"{kind}: only {len(stamps)} buffers came out")
    return {"fps": (len(stamps) - 1 - skip) / (stamps[-1] - stamps[skip]), "frames": len(stamps),
            "threads": statistics.mode(threads)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300, help="frames in all, split over the streams")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=2, help="times each row runs, alternating")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # a child: one row, JSON out
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.streams[0], args.frames // args.streams[0])))
        return
    if any(k.startswith("mp_yolo") for k in args.kinds):
        modelpipe_dir()
    if "pyinfer-onnx" in args.kinds:
        onnx_export()  # here, once: the rows' processes find it in the cache
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    for rnd in range(args.rounds):
        for streams in args.streams:
            for kind in args.kinds:
                cmd = [sys.executable, __file__, "--one", kind, "--streams", str(streams), "--frames",
                       str(args.frames)]
                load = os.getloadavg()[0]  # what else ran: this VM is shared
                done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(kind),
                                      check=False)
                if done.returncode:
                    raise SystemExit(f"{kind} x{streams} failed:\n{done.stderr[-2000:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1]) | {"load": load}
                runs.setdefault((streams, kind), []).append(result)
                print(f"round {rnd + 1} streams {streams} {kind}: {result['fps']:.2f} frames/s "
                      f"({result['threads']} torch threads; load {load:.2f} at the start)", flush=True)
                write_table(runs, args, quiet=True)  # a run cut short keeps the rounds done so far
    write_table(runs, args)


def write_table(runs: dict[tuple[int, str], list[dict[str, float]]], args: argparse.Namespace,
                quiet: bool = False) -> None:
    def cell(streams: int, kind: str) -> str:
        got = runs.get((streams, kind))
        if not got:
            return "-"
        fps = [r["fps"] for r in got]
        return f"{statistics.median(fps):.2f} ({', '.join(f'{f:.2f}' for f in fps)}; {got[0]['threads']}t)"

    def ratio(streams: int, ours: str, peer: str) -> str:
        a, b = runs.get((streams, ours)), runs.get((streams, peer))
        if not a or not b:
            return "-"
        return f"{statistics.median(r['fps'] for r in a) / statistics.median(r['fps'] for r in b):.2f}"

    loads = [r["load"] for got in runs.values() for r in got]
    head = (f"{os.cpu_count()} cores, {args.frames} vtest frames per run (split over the streams), {args.rounds} "
            "rounds alternating; cell: median frames/s (each run; torch threads); 1-minute load average at the "
            f"runs' starts {min(loads):.2f}-{max(loads):.2f}")
    lines = [head, "",
             "| streams | " + " | ".join(KINDS) + " | torch / mp_yolo-all | ONNX / mp_yolo-all |",
             "|---|" + "---|" * (len(KINDS) + 2)]
    for streams in args.streams:
        lines.append(f"| {streams} | " + " | ".join(cell(streams, k) for k in KINDS)
                     + f" | {ratio(streams, 'pyinfer-torch', 'mp_yolo-all')} | "
                     f"{ratio(streams, 'pyinfer-onnx', 'mp_yolo-all')} |")
    from pyinfer_cpu import publish  # here: the runs this script starts as subprocesses need no GStreamer

    publish("peer_modelpipe", lines, show=not quiet)


if __name__ == "__main__":
    main()
