"""Helpers to run the tests' real servers: free ports, health waits, the argv of ``vlm_server.py``."""
from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wait_healthy(proc: subprocess.Popen, port: int, path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise TimeoutError(f"server on port {port} not healthy within {timeout_s} s")


def server_argv(port: int, mode: str, *rest: str) -> list[str]:
    return [sys.executable, str(HERE / "vlm_server.py"), str(port), mode, *rest]
