"""gst-python plugin entry for pyosd (imported at scan time: no heavy imports)."""
from gi.repository import Gst

from inferstream.elements.pyosd import PyOsd

Gst.init_python()
__gstelementfactory__ = ("pyosd", Gst.Rank.NONE, PyOsd)
