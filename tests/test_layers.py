"""House rules that keep the plugin scan fast and the core testable without GStreamer (STYLE.md R1, R6)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "src" / "inferstream" / "gst_plugins" / "python"


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_core_layers_do_not_import_gi() -> None:
    code = ("import inferstream.ops.letterbox, inferstream.ops.nms, inferstream.ops.draw, inferstream.models.registry,"
            " inferstream.nvinfer_config, inferstream.gst_plugins,"
            " inferstream.tracking, inferstream.messaging.schema, inferstream.inference, inferstream.batching, sys;"
            " print('gi' in sys.modules)")
    assert _run(code) == "False"


def test_plugin_scan_imports_no_torch() -> None:
    """gst-python imports every plugin file at scan time: torch must load only when an element starts."""
    files = sorted(PLUGINS.glob("*.py"))
    assert {f.stem for f in files} >= {"pyinfer", "pyosd", "pytracker", "pymsgconv", "pymsgbroker"}
    code = ("import gi, runpy, sys; gi.require_version('Gst', '1.0'); from gi.repository import Gst; Gst.init(None);"
            f" [runpy.run_path(p) for p in {[str(f) for f in files]!r}];"
            " print('torch' in sys.modules, 'numpy' in sys.modules)")
    assert _run(code) == "False False"
