"""Start a real KServe v2 server (PyTriton's tritonserver, or MLServer) from ``.triton-venv`` and wait for its model.

The venv is made by ./setup (PyTriton needs numpy<2 and the system python's shared libpython); tests skip with the
command that makes it when it is missing.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from ports import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".triton-venv"
HERE = Path(__file__).resolve().parent


def venv_python() -> Path | None:
    """The server venv's python, or None when ./setup has not made it."""
    python = VENV / "bin" / "python"
    return python if python.is_file() else None


class ServerProcess:
    """One server process in its own process group; ``close`` ends the group (tritonserver and its stubs)."""

    def __init__(self, argv: list[str], http_port: int, grpc_port: int, model: str, log: Path) -> None:
        self.http_port, self.grpc_port, self.model, self.log = http_port, grpc_port, model, log
        self._log_file = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True,
                                     cwd=log.parent)

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}/{self.model}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/{self.model}"

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Poll the KServe v2 model-ready endpoint; raise with the server's log tail if it never gets there."""
        deadline = time.monotonic() + timeout_s
        url = f"http://127.0.0.1:{self.http_port}/v2/models/{self.model}/ready"
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        tail = self.log.read_text(errors="replace")[-2000:]
        self.close()
        raise RuntimeError(f"the server's model {self.model} was not ready within {timeout_s} s:\n{tail}")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log_file.close()


def start_pytriton(python: Path, onnx: Path, model: str, workdir: Path, *, nhwc_twin: bool = False) -> ServerProcess:
    """PyTriton serving ``onnx`` as ``model`` on free loopback ports; returns once the model is ready."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    argv = [str(python), str(HERE / "pytriton_onnx.py"), str(onnx), "--name", model, "--http-port", str(http),
            "--grpc-port", str(grpc), "--metrics-port", str(metrics), *(["--nhwc-twin"] if nhwc_twin else [])]
    server = ServerProcess(argv, http, grpc, model, workdir / f"pytriton-{model}.log")
    server.wait_ready()
    return server


def start_mlserver(python: Path, onnx: Path, model: str, workdir: Path) -> ServerProcess:
    """MLServer (pure-Python KServe v2) serving ``onnx`` through ``mlserver_onnx/onnx_runtime.py``."""
    import json
    import shutil

    http, grpc, metrics = free_port(), free_port(), free_port()
    root = workdir / "mlserver"
    folder = root / model
    folder.mkdir(parents=True)
    shutil.copy(HERE / "mlserver_onnx" / "onnx_runtime.py", folder / "onnx_runtime.py")
    (root / "settings.json").write_text(json.dumps({
        "http_port": http, "grpc_port": grpc, "metrics_port": metrics, "host": "127.0.0.1", "parallel_workers": 0,
        "grpc_max_message_length": 64 << 20,
        "debug": False}))
    (folder / "model-settings.json").write_text(json.dumps({
        "name": model, "implementation": "onnx_runtime.OnnxModel", "parameters": {"uri": str(onnx)},
        "inputs": [{"name": "images", "datatype": "FP32", "shape": [-1, 3, 640, 640]}],
        "outputs": [{"name": "output0", "datatype": "FP32", "shape": [-1, 6, 8400]}]}))
    server = ServerProcess([str(python.parent / "mlserver"), "start", str(root)], http, grpc, model,
                           workdir / f"mlserver-{model}.log")
    server.wait_ready()
    return server
