"""gst-python plugin entry for pyinfer (the loader imports this at scan time: no heavy imports)."""
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.elements.pyinfer import PyInfer

Gst.init_python()
__gstelementfactory__ = ("pyinfer", Gst.Rank.NONE, PyInfer)
