"""Post GStreamer error/warning messages like GST_ELEMENT_ERROR does (R8): text for users, debug for developers."""
from __future__ import annotations

import sys
from typing import Final

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.errors import (
    BackendInitError,
    ConfigError,
    ModelNotFoundError,
    UnsupportedFormatError,
    UnsupportedModelError,
)

# exception -> (Gst quark function name, code name); looked up at call time (R8: Gst.* are stubs before init)
_GST_ERROR: Final = {
    ModelNotFoundError: ("resource_error_quark", "NOT_FOUND", "ResourceError"),
    UnsupportedModelError: ("stream_error_quark", "WRONG_TYPE", "StreamError"),
    BackendInitError: ("library_error_quark", "INIT", "LibraryError"),
    ConfigError: ("library_error_quark", "SETTINGS", "LibraryError"),
    UnsupportedFormatError: ("stream_error_quark", "FORMAT", "StreamError"),
}
_DEFAULT = ("stream_error_quark", "FAILED", "StreamError")


def _post(element: Gst.Element, kind: Gst.MessageType, exc: BaseException, text: str) -> None:
    quark_fn, code, enum = next((v for k, v in _GST_ERROR.items() if isinstance(exc, k)), _DEFAULT)
    frame = sys._getframe(2)
    element.message_full(kind, getattr(Gst, quark_fn)(), getattr(getattr(Gst, enum), code), text,
                         f"{type(exc).__name__}: {exc}", frame.f_code.co_filename, frame.f_code.co_name,
                         frame.f_lineno)


def post_error(element: Gst.Element, exc: BaseException, text: str) -> None:
    """Post an ERROR message on the bus; the caller then returns FlowReturn.ERROR or False."""
    _post(element, Gst.MessageType.ERROR, exc, f"{text}: {exc}")


def post_warning(element: Gst.Element, exc: BaseException, text: str) -> None:
    """Post a WARNING message on the bus; processing goes on."""
    _post(element, Gst.MessageType.WARNING, exc, f"{text}: {exc}")
