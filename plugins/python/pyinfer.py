"""gst-python plugin entry for pyinfer (the loader imports this at scan time: no heavy imports)."""
from gi.repository import Gst

from inferstream.elements.pyinfer import PyInfer

Gst.init_python()
__gstelementfactory__ = ("pyinfer", Gst.Rank.NONE, PyInfer)
