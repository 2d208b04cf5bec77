"""gst-python plugin entry for pyosd (imported at scan time: no heavy imports)."""
import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

from inferstream.elements.pyosd import PyOsd  # noqa: E402

Gst.init_python()
__gstelementfactory__ = ("pyosd", Gst.Rank.NONE, PyOsd)
