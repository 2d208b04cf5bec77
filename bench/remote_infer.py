"""Remote inference (KServe v2: Triton, MLServer) against the local ONNX backend, side by side in one run (CPU).

    python bench/remote_infer.py [--frames 60] [--calls 30]

The same person detector ONNX runs locally (onnxruntime in the pipeline's process) and on servers started here from
``.triton-venv`` (PyTriton's tritonserver with onnxruntime in its Python callable; MLServer with an onnxruntime
runtime), on the same machine. Per row: pipeline frames/s (``bench/pyinfer_cpu.py``'s pipeline: vtest.avi decoded,
pyinfer, fakesink) and the backend's median time per call on a ready 640x640 batch of 1; the added latency is
that median minus the local one (transport, (de)serialisation, the server's scheduling). Server and client share
the machine's cores, as an edge box running its own Triton would.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst
from pyinfer_cpu import pipeline_fps, publish

from inferstream.samples import person_detector

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
LABELS = "labels=Normal,Fall"


def call_ms(spec: str, calls: int) -> float:
    """Median milliseconds of one backend call on a ready batch of 1."""
    import torch

    from inferstream.backends.loader import load_backend

    backend = load_backend(spec)
    x = torch.rand((1, 3, 640, 640), dtype=backend.dtype)
    for _ in range(3):
        backend(x)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        backend(x)
        times.append(time.perf_counter() - t0)
    backend.close()
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    Gst.init(None)
    from servers.launch import start_mlserver, start_pytriton, venv_python

    python = venv_python()
    if python is None:
        raise SystemExit("no .triton-venv: run ./setup")
    onnx = person_detector("onnx")
    work = Path(tempfile.mkdtemp(prefix="remote-bench-"))
    triton = start_pytriton(python, onnx, "person", work)
    # ./setup installs no MLServer where the system python is 3.13 (MLServer 1.7 requires < 3.13): Triton rows only
    mlserver = start_mlserver(python, onnx, "person", work) if (python.parent / "mlserver").is_file() else None
    if mlserver is None:
        print("no MLServer in .triton-venv (its python is 3.13 or newer): MLServer rows left out", flush=True)
    try:
        cases = [("local ONNX Runtime (in process)", str(onnx), LABELS),
                 ("Triton gRPC, system shm", triton.grpc_url, LABELS),
                 ("Triton gRPC, in the request", triton.grpc_url + "?shm=off", LABELS),
                 ("Triton HTTP, binary tensors", triton.http_url + "?shm=off", LABELS)]
        if mlserver is not None:
            cases += [("MLServer gRPC", mlserver.grpc_url, LABELS),
                      ("MLServer HTTP (JSON tensors)", mlserver.http_url, LABELS)]
        rows = []
        for name, spec, props in cases:
            ms = call_ms(spec, args.calls)
            fps = pipeline_fps(spec, args.frames, props)  # type: ignore[arg-type]
            rows.append((name, fps, ms))
            print(f"{name}: {fps:.2f} frames/s, {ms:.1f} ms per call", flush=True)
    finally:
        triton.close()
        if mlserver is not None:
            mlserver.close()
    local_ms = rows[0][2]
    lines = [(f"{args.frames} frames of vtest.avi (768x576) through pyinfer, batch 1; backend call median of "
             f"{args.calls} on a ready 640x640 batch"), "",
             "| backend | pipeline (frames/s) | call median (ms) | added latency (ms) |", "|---|---|---|---|"]
    lines += [f"| {name} | {fps:.2f} | {ms:.1f} | {ms - local_ms:+.1f} |" for name, fps, ms in rows]
    publish("remote_infer", lines)


if __name__ == "__main__":
    sys.exit(main())
