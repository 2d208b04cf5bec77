"""Exceptions that map to GStreamer error domains at the element boundary (see elements/_errors.py)."""
from __future__ import annotations


class InferstreamError(Exception):
    """Base of every error inferstream raises on purpose; the message is meant for the user."""


class ConfigError(InferstreamError):
    """A property or config value is invalid or inconsistent."""


class ModelNotFoundError(InferstreamError):
    """The model path does not exist or cannot be read."""


class UnsupportedModelError(InferstreamError):
    """The file is not a model we can load, or its outputs match no decoder."""


class BackendInitError(InferstreamError):
    """A runtime (torch, onnxruntime) failed to initialise the model."""


class UnsupportedFormatError(InferstreamError):
    """A frame format or memory kind that the frames/ layer cannot view."""


class MetaWriteError(InferstreamError):
    """Writing analytics metadata to a buffer failed."""


class InferenceServerError(InferstreamError):
    """A remote inference server (Triton, KServe v2) failed a request, or stayed unreachable through the retries."""
