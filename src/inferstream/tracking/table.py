"""The state of a tracker's live tracks, as parallel numpy arrays (select and append rows in one call each)."""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(slots=True)
class TrackTable:
    """A tracker's live tracks as parallel arrays, one row per track (tentative tracks have ``ids == -1``)."""

    mean: FloatArray  # [T, 8] Kalman state of the (envelope) box at the tracker's state time
    cov: FloatArray  # [T, 8, 8]
    ids: IntArray  # [T]
    hits: IntArray  # [T] consecutive detection frames with a match
    first_seen_ns: IntArray  # [T]
    last_seen_ns: IntArray  # [T]
    lost: BoolArray  # [T] unmatched on the latest detection frame
    labels: IntArray  # [T] latest matched label
    scores: FloatArray  # [T] latest matched score
    angles: FloatArray  # [T] latest matched angle, radians
    sizes: FloatArray  # [T, 2] latest matched unrotated (w, h), oriented boxes only

    @classmethod
    def empty(cls) -> TrackTable:
        """No tracks (every array its own, so in-place updates never alias)."""
        def ints() -> IntArray:
            return np.zeros(0, dtype=np.int64)

        return cls(mean=np.zeros((0, 8)), cov=np.zeros((0, 8, 8)), ids=ints(), hits=ints(), first_seen_ns=ints(),
                   last_seen_ns=ints(), lost=np.zeros(0, dtype=bool), labels=ints(), scores=np.zeros(0),
                   angles=np.zeros(0), sizes=np.zeros((0, 2)))

    def __len__(self) -> int:
        return len(self.ids)

    def select(self, keep: BoolArray | IntArray) -> TrackTable:
        """The rows picked by a bool mask [T] or an index array (a copy)."""
        return TrackTable(*(getattr(self, f.name)[keep] for f in fields(self)))

    def concat(self, other: TrackTable) -> TrackTable:
        """These rows followed by ``other``'s (a copy)."""
        return TrackTable(*(np.concatenate([getattr(self, f.name), getattr(other, f.name)]) for f in fields(self)))
