"""gst-python plugin entry for pytracker (imported at scan time: no heavy imports)."""
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.elements.pytracker import PyTracker

Gst.init_python()
__gstelementfactory__ = ("pytracker", Gst.Rank.NONE, PyTracker)
