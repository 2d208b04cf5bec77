"""When to ask: every N frames or seconds per stream, clips of several frames, and per-track schedules for crops.

Pure bookkeeping on frame numbers and pts (nanoseconds); the element feeds it and builds the requests.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

MODES: Final = ("frame", "clip", "objects")


@dataclass
class FrameSchedule:
    """Due every ``every_frames`` frames, or (when ``every_ns`` > 0) once ``every_ns`` of stream time has passed
    since the last due frame. The first frame is always due."""

    every_frames: int = 1
    every_ns: int = 0
    _last_frame: int | None = None
    _last_pts: int | None = None

    def due(self, frame: int, pts_ns: int) -> bool:
        if self._last_frame is None:
            ok = True
        elif self.every_ns > 0 and self._last_pts is not None and pts_ns >= 0:
            ok = pts_ns - self._last_pts >= self.every_ns
        else:
            ok = frame - self._last_frame >= self.every_frames
        if ok:
            self._last_frame, self._last_pts = frame, pts_ns
        return ok

    def reset(self) -> None:
        self._last_frame = self._last_pts = None


@dataclass
class TrackSchedule:
    """Per-track policy for crops: a track is due when first seen, then (unless ``new_only``) every ``every_ns``
    of stream time (0: only when new). Untracked objects (id < 0) follow the frame schedule instead."""

    new_only: bool = False
    every_ns: int = 0
    _last: dict[int, int] = field(default_factory=dict)

    def due(self, track_id: int, pts_ns: int) -> bool:
        last = self._last.get(track_id)
        if last is None or (not self.new_only and self.every_ns > 0 and pts_ns - last >= self.every_ns):
            self._last[track_id] = pts_ns
            return True
        return False

    def forget_before(self, pts_ns: int, horizon_ns: int) -> None:
        """Drop tracks not asked about within ``horizon_ns`` (bounded memory on long streams)."""
        stale = [t for t, last in self._last.items() if pts_ns - last > horizon_ns]
        for t in stale:
            del self._last[t]

    def reset(self) -> None:
        self._last.clear()


@dataclass
class ClipCollector:
    """Collects ``length`` frames taken ``stride`` frames apart; returns the clip (oldest first) when complete."""

    length: int
    stride: int = 1
    _frames: list[object] = field(default_factory=list)
    _next: int | None = None

    @property
    def collecting(self) -> bool:
        return bool(self._frames)

    def add(self, frame: int, image: object) -> list[object] | None:
        if self._next is not None and frame < self._next:
            return None
        self._frames.append(image)
        self._next = frame + self.stride
        if len(self._frames) < self.length:
            return None
        clip, self._frames = self._frames, []
        return clip

    def reset(self) -> None:
        self._frames, self._next = [], None
