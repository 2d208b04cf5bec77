"""gst-python plugin entry for pymsgbroker (imported at scan time: no heavy imports)."""
from gi.repository import Gst

from inferstream.elements.pymsgbroker import PyMsgBroker

Gst.init_python()
__gstelementfactory__ = ("pymsgbroker", Gst.Rank.NONE, PyMsgBroker)
