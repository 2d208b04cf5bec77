"""Multi-object trackers on Detections (no GStreamer): one instance per stream, time as pts in nanoseconds.

Adding an algorithm is one entry in ``TRACKERS``: a name and a class whose keyword arguments are its settings.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Final

from inferstream.errors import ConfigError
from inferstream.tracking.base import TrackColumns, Tracker, TrackResult, TrackState
from inferstream.tracking.bytetrack import ByteTrack, update_streams
from inferstream.tracking.kalman import KalmanNoise

TRACKERS: Final[dict[str, Callable[..., Tracker]]] = {
    "bytetrack": ByteTrack,
}


def make_tracker(name: str, **params: Any) -> Tracker:
    """Build the tracker registered as ``name`` with its keyword settings.

    Raises:
        ConfigError: unknown name, an unknown setting, or a setting out of range.
    """
    if (factory := TRACKERS.get(name)) is None:
        raise ConfigError(f"unknown tracker {name!r}; known: {sorted(TRACKERS)}")
    try:
        inspect.signature(factory).bind(**params)
    except TypeError as exc:
        accepted = sorted(inspect.signature(factory).parameters)
        raise ConfigError(f"tracker {name!r}: {exc}; accepted settings: {accepted}") from None
    return factory(**params)


__all__ = ["TRACKERS", "ByteTrack", "KalmanNoise", "TrackColumns", "TrackResult", "TrackState", "Tracker", "make_tracker", "update_streams"]
