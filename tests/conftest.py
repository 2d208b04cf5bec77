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


@pytest.fixture(scope="session")
def vtest() -> Path:
    from inferstream.data import vtest_path

    return vtest_path()


@pytest.fixture(scope="session")
def person_onnx() -> Path:
    from inferstream.data import person_detector

    return person_detector("onnx")


@pytest.fixture(scope="session")
def person_pt() -> Path:
    from inferstream.data import person_detector

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
