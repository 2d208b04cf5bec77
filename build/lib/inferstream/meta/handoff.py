"""What ``write_detections`` just attached to a buffer, left for the next ``read_detections`` in this process.

pytracker, right after pyinfer, read back box by box through the C API exactly what pyinfer had in hand: on
``bench/host_overhead_cpu.py`` that read was a visible share of the host work per frame. So the writer leaves what it wrote,
keyed by the buffer, and the next reader takes it (once) if the buffer still holds the same relation meta, with
the same number of entries, the same timestamp and the same first box. An element in between that adds, drops or
copies metadata changes one of these, and the reader then reads the buffer as usual. Only a write into a buffer
that had no analytics entries is left: then what was written is all that a read would find. Entries are few and
short-lived (the oldest is dropped beyond ``MAX_ENTRIES``), so one that no reader takes costs nothing.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

MAX_ENTRIES = 256  # a few batches of the largest pipelines; a reader comes right after the writer


@dataclass(frozen=True, slots=True)
class Written:
    """One write: the relation meta's state after it, and the values as the C API stored them.

    Attributes:
        rmeta: address of the relation meta. length: its entry count after the write. pts: the buffer's pts.
        boxes_xyxy: the edges as written (whole pixels, float32). scores, angles: float32 per row (angles None:
            axis-aligned). label_quarks, od_ids: per row. producer: the producer's unique id, or None when not
            recorded. first_box: ``(x, y, w, h)`` of the first ODMtd (None: no rows), for the reader's check.
    """

    rmeta: int
    length: int
    pts: int
    boxes_xyxy: Tensor
    scores: Tensor
    angles: Tensor | None
    label_quarks: list[int]
    od_ids: list[int]
    producer: int | None
    first_box: tuple[int, int, int, int] | None


_entries: OrderedDict[int, Written] = OrderedDict()
_lock = threading.Lock()


def leave(buffer_address: int, written: Written) -> None:
    """Keep ``written`` for the next reader of the buffer at ``buffer_address`` (replacing an older entry)."""
    with _lock:
        _entries.pop(buffer_address, None)
        _entries[buffer_address] = written
        if len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)


def take(buffer_address: int, rmeta: int, length: int, pts: int) -> Written | None:
    """The entry left for this buffer if its relation meta, entry count and pts are unchanged, else None.

    The entry is removed either way. The caller still compares the first box (``Written.first_box``) with the
    buffer's, which tells a stale entry from a recycled buffer whose new metadata happens to match the rest.
    """
    with _lock:
        written = _entries.pop(buffer_address, None)
    if written is None or (written.rmeta, written.length, written.pts) != (rmeta, length, pts):
        return None
    return written


def clear() -> None:
    """Forget every entry (tests; a reader then reads the buffer itself)."""
    with _lock:
        _entries.clear()
