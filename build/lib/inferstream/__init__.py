"""inferstream: your own PyTorch / ONNX models in GStreamer pipelines, writing standard analytics metadata."""
from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """Lazy export: ``inferstream.run`` without importing GStreamer or torch at ``import inferstream``."""
    if name == "run":
        from inferstream.app.api import run

        return run
    raise AttributeError(f"module 'inferstream' has no attribute {name!r}")
