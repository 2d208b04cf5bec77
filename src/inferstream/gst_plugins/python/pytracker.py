"""gst-python plugin entry for pytracker (imported at scan time: no heavy imports)."""
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

from inferstream.elements.pytracker import PyTracker  # noqa: E402

Gst.init_python()
__gstelementfactory__ = ("pytracker", Gst.Rank.NONE, PyTracker)
