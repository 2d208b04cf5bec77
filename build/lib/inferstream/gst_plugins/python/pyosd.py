"""gst-python plugin entry for pyosd (imported at scan time: no heavy imports)."""
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.elements.pyosd import PyOsd

Gst.init_python()
__gstelementfactory__ = ("pyosd", Gst.Rank.NONE, PyOsd)
