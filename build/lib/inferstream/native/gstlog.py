"""One logging channel: the house's Python loggers (``inferstream.*``) written to GStreamer's debug log.

The core layers log through ``logging.getLogger(__name__)`` and never import gi. The elements call
``route_to_gst_debug()`` when they load: from then on every record of a logger ``inferstream.X`` goes to the
GStreamer debug category of the same name, so ``GST_DEBUG=inferstream*:5`` shows them beside GStreamer's own
(``GST_DEBUG=inferstream.native*:4`` narrows it). A warning that the category's threshold would hide still reaches
stderr once, as Python prints it where nothing routes it, so the fallback warnings are not lost without
``GST_DEBUG``. Without GStreamer (the core's tests, tools), nothing is routed and Python's logging works as usual.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import threading
from typing import Final

from inferstream.native.gst import bind, pydll

ROOT_LOGGER: Final = "inferstream"
# logging level -> GstDebugLevel (gst/gstinfo.h)
_GST_ERROR, _GST_WARNING, _GST_INFO, _GST_DEBUG, _GST_LOG = 1, 2, 4, 5, 6
_LOCK = threading.Lock()


def _gst_level(levelno: int) -> int:
    if levelno >= logging.ERROR:
        return _GST_ERROR
    if levelno >= logging.WARNING:
        return _GST_WARNING
    if levelno >= logging.INFO:
        return _GST_INFO
    return _GST_DEBUG if levelno >= logging.DEBUG else _GST_LOG


@functools.cache
def _libgst() -> ctypes.PyDLL:
    gst = pydll("libgstreamer-1.0.so.0")
    vp, i, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    bind(gst, [("_gst_debug_category_new", vp, (cp, ctypes.c_uint, cp)),
               ("gst_debug_category_get_threshold", i, (vp,)),
               ("gst_debug_log_literal", None, (vp, i, cp, cp, i, vp, cp))])
    return gst


@functools.cache
def _category(name: str) -> int:
    """The GStreamer debug category ``name`` (created once; categories live as long as the process)."""
    return int(_libgst()._gst_debug_category_new(name.encode(), 0, f"inferstream: {name}".encode()) or 0)


class GstDebugHandler(logging.Handler):
    """Writes each record to the GStreamer debug category named like its logger."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            category = _category(record.name)
            level = _gst_level(record.levelno)
            shown = _libgst().gst_debug_category_get_threshold(category) >= level
            if shown:
                _libgst().gst_debug_log_literal(category, level, record.pathname.encode(), record.funcName.encode(),
                                                record.lineno, None, self.format(record).encode())
            if (not shown and record.levelno >= logging.WARNING and not logging.getLogger().handlers
                    and logging.lastResort is not None):  # printed as Python would where nothing routes it
                logging.lastResort.handle(record)
        except Exception:  # noqa: BLE001 (logging must never raise into the caller)
            self.handleError(record)


def route_to_gst_debug() -> None:
    """Route the ``inferstream`` loggers to GStreamer's debug log (idempotent; needs ``Gst.init`` done).

    Where ``GST_DEBUG`` asks the ``inferstream`` category for info or more and Python's logging was not told a
    level for these loggers, they are opened to that level (else Python's default, warnings, stays)."""
    root = logging.getLogger(ROOT_LOGGER)
    with _LOCK:
        if any(isinstance(h, GstDebugHandler) for h in root.handlers):
            return
        root.addHandler(GstDebugHandler())
        threshold = _libgst().gst_debug_category_get_threshold(_category(ROOT_LOGGER))
        if root.level == logging.NOTSET and threshold >= _GST_INFO:
            root.setLevel(logging.DEBUG if threshold >= _GST_DEBUG else logging.INFO)


def gst_debug(name: str, levelno: int, text: str) -> None:
    """``text`` to the GStreamer debug category ``name`` alone, at the ``logging`` level ``levelno``: the elements'
    own diagnostics, for which GStreamer's log is the only channel (they may repeat per caps query)."""
    category, level = _category(name), _gst_level(levelno)
    if _libgst().gst_debug_category_get_threshold(category) >= level:
        _libgst().gst_debug_log_literal(category, level, b"", b"", 0, None, text.encode())
