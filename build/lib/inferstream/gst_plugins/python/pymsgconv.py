"""gst-python plugin entry for pymsgconv (imported at scan time: no heavy imports)."""
from gi.repository import Gst

from inferstream.elements.pymsgconv import PyMsgConv

Gst.init_python()
__gstelementfactory__ = ("pymsgconv", Gst.Rank.NONE, PyMsgConv)
