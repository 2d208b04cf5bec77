"""The latest VLM answer per stream (whole frame) and per tracked object, for an OSD that shows them."""
from __future__ import annotations

from collections import OrderedDict
from typing import Final

_MAX_TRACKS: Final = 1024  # oldest-updated tracks are forgotten beyond this


class LatestAnswers:
    """``update`` with each frame's answers; ``frame_text`` and ``for_track`` give what to show."""

    def __init__(self) -> None:
        self.frame_text = ""
        self._tracks: OrderedDict[int, str] = OrderedDict()

    def update(self, text: str, track_id: int, is_object: bool) -> None:
        if not is_object:
            self.frame_text = text
        elif track_id >= 0:
            self._tracks[track_id] = text
            self._tracks.move_to_end(track_id)
            while len(self._tracks) > _MAX_TRACKS:
                self._tracks.popitem(last=False)

    def for_track(self, track_id: int) -> str | None:
        return self._tracks.get(track_id) if track_id >= 0 else None
