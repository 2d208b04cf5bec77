"""Fixtures for the VLM tests: the tiny model folder, and real OpenAI-compatible server processes."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vlm.vlm_servers import wait_healthy


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vlm_models import build_tiny_llava

    return build_tiny_llava(tmp_path_factory.mktemp("vlm") / "tiny-llava")


@pytest.fixture
def start_server() -> Iterator[Callable[..., str]]:
    """``start_server(argv, port)`` runs a server process and returns its base URL (``.../v1``); killed after."""
    procs: list[subprocess.Popen] = []

    def start(argv: list[str], port: int, health: str = "/health", timeout_s: float = 60.0) -> str:
        # USE_HUB_KERNELS=0: transformers serve >= 5.25 would load hub kernels by default (a download, and the
        # `kernels` package); offline, the model loads as it is
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "USE_HUB_KERNELS": "0"}
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        wait_healthy(proc, port, health, timeout_s)
        return f"http://127.0.0.1:{port}/v1"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
