"""native.gstlog: once the elements are loaded, the core's Python log records reach GStreamer's debug log under
their logger's name (GST_DEBUG=inferstream*:N), and a warning GStreamer would hide still reaches stderr once."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# a real fallback: the C compiler fails, native.cc warns that the loops run in Python
CODE = """
import gi; gi.require_version("Gst", "1.0"); from gi.repository import Gst; Gst.init(None)
import inferstream.elements
from inferstream.native import cc
assert cc.load_c("demo", "int f(void) { return 0; }") is None
"""


def _run(tmp_path: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "GST_DEBUG"}
    full |= {"INFERSTREAM_CACHE": str(tmp_path), "CC": "/bin/false", "GST_DEBUG_NO_COLOR": "1", **env}
    return subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True, env=full).stderr


def test_gst_debug_shows_the_core_warning_in_its_category(tmp_path: Path) -> None:
    err = _run(tmp_path, GST_DEBUG="inferstream*:5")
    lines = [line for line in err.splitlines() if "inferstream.native.cc" in line]
    assert len(lines) == 1, err
    assert " WARN " in lines[0] and "could not build demo" in lines[0] and "runs as Python loops" in lines[0]


def test_without_gst_debug_the_warning_reaches_stderr_once(tmp_path: Path) -> None:
    err = _run(tmp_path)
    assert err.count("could not build demo") == 1, err
    assert "inferstream.native.cc" not in err  # plain, as Python prints it: not a GStreamer debug line
