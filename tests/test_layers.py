"""House rules that keep the plugin scan fast and the core testable without GStreamer (STYLE.md R1, R6), and the
import order of the rooms (docs/layers.md)."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "inferstream"
PLUGINS = SRC / "gst_plugins" / "python"

# The rooms of src/inferstream/, lowest first (docs/layers.md draws it). A module may import its own room and the
# rooms of lower layers, never a room of its own layer or above; only the rooms marked gi may import GStreamer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "detections", "rawframe"),  # the shared vocabulary: errors, Detections, RawFrame
    ("cache",),  # the cache directory
    # everything that talks to C (ctypes into GStreamer and CUDA, struct layouts, compiled loops); the sample data
    ("native", "samples", "gstcompat"),  # gstcompat: what differs between the gst-python releases we run on
    ("ops", "backends", "vlm", "nvinfer_config", "shared_worker", "model_thread"),  # pure computation, one job each
    ("models", "frames", "tracking"),  # model families (over backends and ops); buffers -> RawFrame; ByteTrack
    ("meta", "model_server"),  # metadata writers and readers; the process that serves one model to many workers
    # (over backends and models: it decodes for them)
    ("inference", "secondary"),  # a batch through a model: primary, and secondary on object crops
    ("batching",),  # frames of many streams into one batch (and the thread that finishes a served model's batches)
    ("runner",),  # one buffer's path: settings, mapping, the batch group, writing, tracking (no GStreamer)
    ("messaging",),  # payloads, brokers, spool
    ("elements",),  # the GStreamer element classes
    ("gst_plugins",),  # one gst-python entry file per element
    ("app",),  # CLI, config, pipeline plans, runner
)
GI_ROOMS = frozenset({"native", "gstcompat", "frames", "meta", "elements", "gst_plugins", "app"})
SAME_LAYER = frozenset({("secondary", "inference"), ("inference", "secondary")})  # one job in two files


def _room(module: str) -> str:
    """``inferstream.ops.nms`` -> ``ops``; the package itself (``inferstream``: ``__version__``) -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every import statement, function-level and TYPE_CHECKING
    ones included: a type-only import still says which room leans on which."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(module, alias.name, node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{module}:{node.lineno}: relative import (the house uses absolute ones)"
                found.append((module, node.module or "", node.lineno))
    return found


def test_every_room_is_placed_in_a_layer() -> None:
    rooms = {_room(m) for m, _, _ in _imports()} - {""}
    placed = {room for layer in LAYERS for room in layer}
    assert rooms <= placed, f"place the new room(s) {sorted(rooms - placed)} in LAYERS and docs/layers.md"
    assert placed <= rooms, f"LAYERS names rooms that no longer exist: {sorted(placed - rooms)}"


def test_rooms_import_only_lower_layers() -> None:
    level = {room: i for i, layer in enumerate(LAYERS) for room in layer}
    bad = []
    for module, imported, line in _imports():
        src, dst = _room(module), _room(imported)
        if not imported.startswith("inferstream") or src == dst or dst == "" or src == "":
            continue  # outside the package, its own room, the package's __version__, the package's lazy `run`
        if level[dst] > level[src] or (level[dst] == level[src] and (src, dst) not in SAME_LAYER):
            bad.append(f"{module}:{line} imports {imported} ({src} is layer {level[src]}, {dst} layer {level[dst]})")
    assert bad == []


def test_only_the_gstreamer_rooms_import_gi() -> None:
    bad = [f"{module}:{line}" for module, imported, line in _imports()
           if (imported == "gi" or imported.startswith("gi.")) and _room(module) not in GI_ROOMS]
    assert bad == []


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


def test_importing_changes_no_process_state() -> None:
    """No Gst.init at import (the app calls it on first use) and no process-wide warnings filter."""
    code = ("import numpy, warnings; before = list(warnings.filters);"  # numpy adds its own filters
            " import inferstream.app.runner, inferstream.app.gstprops, inferstream.app.checks, inferstream.frames.system;"
            " from gi.repository import Gst;"
            " print(Gst.is_initialized(), warnings.filters == before)")
    assert _run(code) == "False True"
