"""The state of a tracker's live tracks, as parallel numpy arrays (select and append tracks in one call each)."""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from inferstream.tracking.kalman import STATE_ROWS

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(slots=True)
class TrackTable:
    """A tracker's live tracks as parallel arrays, the track axis last (tentative tracks have ``ids == -1``)."""

    states: FloatArray  # [STATE_ROWS, T] packed Kalman states of the (envelope) box at the tracker's state time
    ids: IntArray  # [T]
    hits: IntArray  # [T] consecutive detection frames with a match
    first_seen_ns: IntArray  # [T]
    last_seen_ns: IntArray  # [T]
    lost: BoolArray  # [T] unmatched on the latest detection frame
    labels: IntArray  # [T] latest matched label
    scores: FloatArray  # [T] latest matched score
    angles: FloatArray  # [T] latest matched angle, radians
    sizes: FloatArray  # [2, T] latest matched unrotated (w, h), oriented boxes only

    @classmethod
    def empty(cls) -> TrackTable:
        """No tracks (every array its own, so in-place updates never alias)."""
        def ints() -> IntArray:
            return np.zeros(0, dtype=np.int64)

        return cls(states=np.zeros((STATE_ROWS, 0)), ids=ints(), hits=ints(), first_seen_ns=ints(),
                   last_seen_ns=ints(), lost=np.zeros(0, dtype=bool), labels=ints(), scores=np.zeros(0),
                   angles=np.zeros(0), sizes=np.zeros((2, 0)))

    def __len__(self) -> int:
        return len(self.ids)

    def select(self, keep: BoolArray | IntArray | slice) -> TrackTable:
        """The tracks picked by a bool mask [T] or an index array (a copy), or by a slice (views)."""
        return TrackTable(*(getattr(self, name)[..., keep] for name in _FIELDS))

    def with_states(self, states: FloatArray) -> TrackTable:
        """These tracks with other Kalman states (the other arrays shared)."""
        return TrackTable(states, self.ids, self.hits, self.first_seen_ns, self.last_seen_ns, self.lost, self.labels,
                          self.scores, self.angles, self.sizes)

    @classmethod
    def join(cls, tables: list[TrackTable], out: TrackTable | None = None) -> TrackTable:
        """The tracks of ``tables`` one table after the other (a copy; into ``out``'s arrays when given)."""
        if out is None:
            return cls(*(np.concatenate([getattr(t, name) for t in tables], axis=-1) for name in _FIELDS))
        for name in _FIELDS:
            np.concatenate([getattr(t, name) for t in tables], axis=-1, out=getattr(out, name))
        return out


_FIELDS = tuple(f.name for f in fields(TrackTable))
