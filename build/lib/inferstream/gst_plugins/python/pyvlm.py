"""gst-python plugin entry for pyvlm (imported at scan time: no heavy imports)."""
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.elements.pyvlm import PyVlm

Gst.init_python()
__gstelementfactory__ = ("pyvlm", Gst.Rank.NONE, PyVlm)
