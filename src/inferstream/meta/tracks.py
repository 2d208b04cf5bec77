"""TrackingMtds: a tracker's results written onto buffers, a batch's frames in one native call. Each is related
``RELATE_TO`` from its ODMtd (``meta.gstanalytics``' conventions), as objectdetectionoverlay and ioutracker expect.
"""
from __future__ import annotations

import ctypes
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from inferstream.errors import MetaWriteError
from inferstream.meta.gstanalytics import _relation_meta
from inferstream.native.analytics import REL_RELATE_TO, Mtd, analytics, loops

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from gi.repository import Gst


class TrackRecord(NamedTuple):
    """What a TrackingMtd carries (ids and GstClockTime nanoseconds), for ``write_tracks``; trackers write theirs as
    a table of columns (``write_track_table``)."""

    od_id: int
    track_id: int
    first_seen_ns: int
    last_seen_ns: int
    lost: bool


def write_tracks(buf: Gst.Buffer, records: Sequence[TrackRecord]) -> None:
    """Add one TrackingMtd per record, related RELATE_TO from its ODMtd."""
    if records:
        import numpy as np

        write_track_table([buf], [len(records)], np.ascontiguousarray(np.array(records, dtype=np.int64).T))


class TrackWriteError(MetaWriteError):
    """A TrackingMtd could not be added to ``buffers[index]`` of ``write_track_table`` (every buffer before it has
    all of its TrackingMtds, it and those after it may lack some)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def write_track_table(buffers: Sequence[Gst.Buffer], counts: Sequence[int], table: npt.NDArray[np.int64]) -> None:
    """The TrackingMtds of several buffers in one native call (a batch's frames): buffer i gets ``counts[i]`` of
    them, from the next columns of ``table``, int64 [5, N], C-contiguous, rows: ODMtd id, track id, first seen
    and last seen (ns), lost (0 or 1); each related RELATE_TO from its ODMtd.

    Raises:
        TrackWriteError: a buffer refused one (not writable), with that buffer's index.
    """
    import numpy as np

    rmetas = []
    for index, (buf, n) in enumerate(zip(buffers, counts)):
        try:
            rmetas.append(_relation_meta(buf) if n else 0)
        except MetaWriteError as exc:  # the buffers before it get theirs all the same
            write_track_table(buffers[:index], counts[:index], table[:, :sum(counts[:index])].copy())
            raise TrackWriteError(str(exc), index) from None
    native = loops()
    if native is not None:
        addresses, per_buffer = np.array(rmetas, dtype=np.uint64), np.array(counts, dtype=np.int64)
        failed = native.write_track_table(native.api, len(rmetas), addresses.ctypes.data, per_buffer.ctypes.data,
                                          table.ctypes.data, table.shape[1], REL_RELATE_TO)
        if failed >= 0:
            index = int(np.searchsorted(np.cumsum(per_buffer), failed, side="right"))
            raise TrackWriteError(f"add_tracking_mtd failed for track {int(table[1, failed])}", index)
        return
    lib = analytics().lib
    trk = Mtd()
    ref = ctypes.byref(trk)
    add, last_seen_fn = lib.gst_analytics_relation_meta_add_tracking_mtd, lib.gst_analytics_tracking_mtd_update_last_seen
    set_lost, relate = lib.gst_analytics_tracking_mtd_set_lost, lib.gst_analytics_relation_meta_set_relation
    columns = iter(table.T.tolist())
    for index, (rmeta, n) in enumerate(zip(rmetas, counts)):
        for od_id, track_id, first, last, is_lost in itertools.islice(columns, n):
            if not add(rmeta, track_id, first, ref):
                raise TrackWriteError(f"add_tracking_mtd failed for track {track_id}", index)
            last_seen_fn(ref, last)
            if is_lost:
                set_lost(ref)
            relate(rmeta, REL_RELATE_TO, od_id, trk.id)
