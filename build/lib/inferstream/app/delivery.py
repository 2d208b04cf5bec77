"""What a stream's pymsgbroker delivered, read from its ``stats`` once the run is over, so that the exit code and
the summary say when events were lost (gst-launch only shows the element's warning)."""
from __future__ import annotations

import json
from dataclasses import dataclass

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst


@dataclass(frozen=True, slots=True)
class Delivery:
    """Counts of one stream's events (message payloads).

    Attributes:
        delivered: confirmed by the broker.
        dropped: lost to the drop-policy: a full inbox, memory or spool, or a spool disk that refused them.
        undelivered: not confirmed at stop and not kept in a spool: lost.
        kept: left in spool-dir, sent first by the next run (not lost).
    """

    delivered: int
    dropped: int
    undelivered: int
    kept: int

    @property
    def lost(self) -> int:
        return self.dropped + self.undelivered

    def note(self) -> str:
        """``events: 12 lost (...)``, ``events: 30 kept in spool-dir ...`` or "" when everything was delivered."""
        parts = []
        if self.lost:
            why = [f"{self.dropped} dropped by drop-policy (full buffers or spool disk)" if self.dropped else "",
                   f"{self.undelivered} undelivered at stop with no spool-dir" if self.undelivered else ""]
            parts.append(f"{self.lost} lost ({', '.join(w for w in why if w)})")
        if self.kept:
            parts.append(f"{self.kept} kept in spool-dir for the next run")
        return f"events: {'; '.join(parts)}; {self.delivered} delivered" if parts else ""


def read_delivery(element: Gst.Element | None) -> Delivery | None:
    """The counts of a stopped pymsgbroker (None: no element, or a publisher that never started)."""
    if element is None:
        return None
    try:
        stats = json.loads(element.get_property("stats") or "{}")
        pending, kept = int(stats["pending"]), int(stats["in_spool"])
        dropped = int(stats["dropped_queue_full"]) + int(stats["dropped_buffer_full"])
        return Delivery(int(stats["delivered"]), dropped, max(0, pending - kept), kept)
    except (KeyError, TypeError, ValueError):
        return None
