"""What differs between the gst-python overrides of the GStreamer releases we run on (DeepStream's 1.24, 1.26 from a
distribution, the pinned 1.28): one helper per difference, so callers read the same on all."""
from __future__ import annotations

from typing import Any


def structure(got: Any) -> Any:
    """The ``Gst.Structure`` from a caps / event / query / context ``get_structure()`` result.

    gst-python 1.26 (Debian 13: 1.26.2) returns a ``StructureWrapper`` there, a context manager that hands out the
    structure only through ``with``; 1.24 and 1.28 return the structure itself (1.28's ``__enter__`` returns it).
    The structure stays owned by its parent: keep that alive. ``Any`` like every gi value here (no stubs): a
    ``Gst.Structure``, or None where ``got`` is None (an event or query without one).
    """
    enter = getattr(got, "__enter__", None)
    return got if enter is None else enter()
