"""inferstream: your own PyTorch / ONNX models in GStreamer pipelines, writing standard analytics metadata."""
from __future__ import annotations

__version__ = "0.1.0"
