"""The gst-python entry files of our elements, shipped inside the package so that a wheel brings them.

``python/`` holds one tiny file per element (the loader scans ``<each GST_PLUGIN_PATH entry>/python/*.py`` and
imports every file in it, so nothing else may live there). ``GST_PLUGIN_PATH`` must name this folder:
``inferstream env`` prints the export; the repository's ``plugins/python`` is a link to ``python/`` here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Final

PLUGIN_PATH: Final = Path(__file__).resolve().parent
"""The GST_PLUGIN_PATH entry for our elements (it holds ``python/``)."""
ELEMENTS: Final = ("pyinfer", "pytracker", "pyosd", "pymsgconv", "pymsgbroker", "pyvlm")
