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
            " inferstream.tracking, inferstream.messaging.schema, inferstream.inference, inferstream.batching,"
            " inferstream.vlm.runner, inferstream.vlm.service, inferstream.vlm.backends, inferstream.vlm.latest,"
            " inferstream.messaging.vlm, sys;"
            " print('gi' in sys.modules)")
    assert _run(code) == "False"


def test_plugin_scan_imports_no_torch() -> None:
    """gst-python imports every plugin file at scan time: torch must load only when an element starts."""
    files = sorted(PLUGINS.glob("*.py"))
    assert {f.stem for f in files} >= {"pyinfer", "pyosd", "pytracker", "pymsgconv", "pymsgbroker", "pyvlm"}
    code = ("import gi, runpy, sys; gi.require_version('Gst', '1.0'); from gi.repository import Gst; Gst.init(None);"
            f" [runpy.run_path(p) for p in {[str(f) for f in files]!r}];"
            " print('torch' in sys.modules, 'numpy' in sys.modules)")
    assert _run(code) == "False False"


def test_plugin_scan_leaves_deepstream_alone() -> None:
    """Without pyservicemaker (stock GStreamer) the scan imports none of it and pyinfer's pads offer exactly the
    CUDA + system caps they offered before the NVMM path existed."""
    files = sorted(PLUGINS.glob("*.py"))
    code = ("import gi, runpy, sys; gi.require_version('Gst', '1.0'); from gi.repository import Gst; Gst.init(None);"
            f" [runpy.run_path(p) for p in {[str(f) for f in files]!r}];"
            " from inferstream.elements.pyinfer import PyInfer;"
            " from inferstream.elements._caps import cuda_or_system_video_caps;"
            " caps = [t.get_caps() for t in PyInfer.__gsttemplates__];"
            " print('pyservicemaker' in sys.modules, all(c.is_equal(cuda_or_system_video_caps()) for c in caps),"
            " any('NVMM' in c.to_string() for c in caps))")
    assert _run(code) == "False True False"


def test_deepstream_modules_import_nothing_heavy() -> None:
    code = ("import inferstream.meta.nvds, inferstream.meta.nvds_fields, inferstream.frames.nvmm,"
            " inferstream.backends.tensorrt_dims, sys;"
            " print([m for m in ('gi', 'torch', 'pyservicemaker', 'tensorrt') if m in sys.modules])")
    assert _run(code) == "[]"
