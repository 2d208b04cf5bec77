"""Shared fixtures: a real GStreamer (the one setup built), sample data, and a pipeline runner."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "false")
os.environ.setdefault("YOLO_CONFIG_DIR", str(ROOT / ".gst" / "ultralytics"))
# pyinfer resolves "module:factory" specs by import: the test models live in tests/
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))


def pytest_configure(config: pytest.Config) -> None:
    if "GST_PLUGIN_PATH" not in os.environ:
        raise pytest.UsageError("run the tests from an activated environment: . .venv/bin/activate (after ./setup)")


# What a test needs, by file (paths under tests/; a folder ends with /). `pytest -m "not pipeline and not broker"`
# leaves the unit tests: no GStreamer pipeline, no app subprocess, no server process.
_MARKED_FILES: dict[str, tuple[str, ...]] = {
    # runs a GStreamer pipeline, the app (`inferstream run`) or a tool that does as a subprocess
    "pipeline": ("elements/", "vlm/test_pyvlm.py", "vlm/test_app_vlm.py", "app/test_cli.py", "app/test_delivery.py",
                 "app/test_demo.py", "app/test_doctor.py", "app/test_pipeline.py", "app/test_runner.py",
                 "app/test_workers.py", "backends/test_remote.py", "tools/test_deepstream_check.py"),
    # starts a real server: a message broker (mosquitto, redis, rabbitmq, Tansu), an inference or a VLM server
    "broker": ("messaging/test_brokers_live.py", "messaging/test_kafka_live.py", "backends/test_remote.py",
               "app/test_delivery.py", "elements/test_pymsgbroker.py", "vlm/test_pyvlm.py"),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test with what it needs: ``pipeline`` / ``broker`` from the table above, ``gpu`` where it is
    skipped without a CUDA device (its ``skipif`` reason names CUDA or a GPU)."""
    for item in items:
        rel = item.path.relative_to(TESTS).as_posix()
        for mark, paths in _MARKED_FILES.items():
            if rel.startswith(paths):
                item.add_marker(mark)
        reasons = (str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
        if any("CUDA" in r or "GPU" in r for r in reasons):
            item.add_marker("gpu")


@pytest.fixture(scope="session")
def vtest() -> Path:
    from inferstream.samples import vtest_path

    return vtest_path()


@pytest.fixture(scope="session")
def person_onnx() -> Path:
    from inferstream.samples import person_detector

    return person_detector("onnx")


@pytest.fixture(scope="session")
def person_pt() -> Path:
    from inferstream.samples import person_detector

    return person_detector("pt")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 96 KiB filesystem (tmpfs mounted with size=, needs root) that fills up with ENOSPC; unmounted after."""
    import subprocess

    mount = tmp_path / "small-fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k,mode=0700", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
