"""``inferstream env`` and ``inferstream doctor``: make a pip install find its elements, and say what a machine lacks.

``env`` prints shell exports for the running interpreter: ``GST_PLUGIN_PATH`` to the packaged plugin folder, the
interpreter's ``bin`` first on ``PATH`` in a virtual environment (the python plugin loader starts its embedded
Python from the first ``python3`` on PATH), and the typelib folder that holds GstAnalytics when it comes from
``GI_TYPELIB_PATH``. ``doctor`` checks GStreamer (>= 1.26), the GstAnalytics typelib, the python plugin loader,
our elements, torch's device and the NVIDIA decode/CUDA elements, one line each; a problem's line says what to
install. GStreamer is imported inside the functions: ``env`` needs none of it.
"""
from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

MIN_GST: Final = (1, 26)
NVIDIA_ELEMENTS: Final = ("nvh264dec", "cudaupload", "cudadownload")
_FIX_GST: Final = ("install GStreamer >= 1.26 (Debian 13: apt-get install gstreamer1.0-tools "
                   "gstreamer1.0-plugins-bad), or build the pinned 1.28.6 with the repository's ./setup")


def env_lines() -> list[str]:
    """The ``export`` lines that let GStreamer (gst-launch-1.0, gst-inspect-1.0, python) find our elements."""
    from inferstream.gst_plugins import PLUGIN_PATH

    lines = [_export_front("GST_PLUGIN_PATH", str(PLUGIN_PATH))]
    if sys.prefix != sys.base_prefix:
        lines.append(_export_front("PATH", str(Path(sys.executable).parent)))
    typelibs = _typelib_dir()
    if typelibs is not None:
        lines.append(_export_front("GI_TYPELIB_PATH", str(typelibs)))
    return lines


def _export_front(name: str, value: str) -> str:
    quoted = shlex.quote(value)
    return f'export {name}={quoted}"${{{name}:+:${name}}}"'


def _typelib_dir() -> Path | None:
    """The GI_TYPELIB_PATH entry holding GstAnalytics (None: not set there; the default search path is used)."""
    for entry in os.environ.get("GI_TYPELIB_PATH", "").split(os.pathsep):
        if entry and (Path(entry) / "GstAnalytics-1.0.typelib").is_file():
            return Path(entry).resolve()
    return None


def doctor(say: Callable[[str], None] = print) -> int:
    """Check this machine; ``say`` gets one line per check (``ok:``, ``note:`` or ``problem:``).

    Returns:
        0 when nothing is a problem, else 1.
    """
    problems = 0

    def report(kind: str, text: str) -> None:
        nonlocal problems
        problems += kind == "problem"
        say(f"{kind}: {text}")

    gst = _gstreamer(report)
    if gst:
        _analytics(report)
        _elements(_python_loader(report), report)
    _torch(report)
    if gst:
        _nvidia(report)
    return 1 if problems else 0


def _gstreamer(report: Callable[[str, str], None]) -> bool:
    """Whether GStreamer's Python bindings load (then Gst is initialised); its version is checked too."""
    try:
        import gi

        gi.require_version("Gst", "1.0")
        from gi.repository import Gst
    except ImportError:
        report("problem", "PyGObject (gi) is not importable: apt-get install python3-gi (with a venv made with "
                          "--system-site-packages), or pip install PyGObject")
        return False
    except ValueError:
        report("problem", f"the Gst typelib is missing: apt-get install gir1.2-gstreamer-1.0; or {_FIX_GST}")
        return False
    Gst.init(None)
    version = Gst.version()
    if (version.major, version.minor) < MIN_GST:
        report("problem", f"{Gst.version_string()} is too old (GstAnalytics needs >= 1.26): {_FIX_GST}")
    else:
        report("ok", Gst.version_string())
    return True


def _analytics(report: Callable[[str, str], None]) -> None:
    import gi

    try:
        gi.require_version("GstAnalytics", "1.0")
        from gi.repository import GstAnalytics  # noqa: F401 (importing it is the check: it loads the typelib)
    except (ValueError, ImportError):
        report("problem", "the GstAnalytics typelib is missing: apt-get install gir1.2-gst-plugins-bad-1.0 "
                          "(GStreamer >= 1.26), or set GI_TYPELIB_PATH to the folder holding GstAnalytics-1.0.typelib")
        return
    report("ok", "GstAnalytics typelib")


def _python_loader(report: Callable[[str, str], None]) -> bool:
    from gi.repository import Gst

    plugin = Gst.Registry.get().find_plugin("python")
    if plugin is None:
        report("problem", "the GStreamer python plugin loader (libgstpython) is not found: apt-get install "
                          "gstreamer1.0-python3-plugin-loader (the build of ./setup includes it)")
        return False
    if plugin.is_loaded() or plugin.load() is not None:
        report("ok", f"python plugin loader ({plugin.get_filename()})")
        return True
    report("problem", f"the python plugin loader {plugin.get_filename()} does not load (blacklisted: delete the "
                      "registry file GST_REGISTRY or ~/.cache/gstreamer-1.0/registry.*.bin, and check that the first "
                      "python3 on PATH is the one inferstream is installed in)")
    return False


def _elements(loader: bool, report: Callable[[str, str], None]) -> None:
    from gi.repository import Gst

    from inferstream.gst_plugins import ELEMENTS, PLUGIN_PATH

    missing = [e for e in ELEMENTS if Gst.ElementFactory.find(e) is None]
    if not missing:
        report("ok", f"elements {', '.join(ELEMENTS)}")
    elif not loader:
        report("problem", f"elements {', '.join(missing)} not registered: they need the python plugin loader above")
    elif str(PLUGIN_PATH) not in os.environ.get("GST_PLUGIN_PATH", "").split(os.pathsep):
        report("problem", f"elements {', '.join(missing)} not registered: GST_PLUGIN_PATH lacks {PLUGIN_PATH}: "
                          'run eval "$(inferstream env)"')
    else:
        report("problem", f"elements {', '.join(missing)} not registered although GST_PLUGIN_PATH has them: their "
                          "import failed (GST_DEBUG=python:4 gst-inspect-1.0 pyinfer shows why; then delete the "
                          "GST_REGISTRY file)")


def _torch(report: Callable[[str, str], None]) -> None:
    try:
        import torch
    except ImportError:
        report("problem", "torch is not importable: pip install 'torch>=2.4' 'torchvision>=0.19'")
        return
    if torch.cuda.is_available():
        report("ok", f"torch {torch.__version__}, device cuda ({torch.cuda.get_device_name(0)})")
    else:
        report("ok", f"torch {torch.__version__}, device cpu (no CUDA device for torch: device=cuda unavailable)")


def _nvidia(report: Callable[[str, str], None]) -> None:
    from gi.repository import Gst

    missing = [e for e in NVIDIA_ELEMENTS if Gst.ElementFactory.find(e) is None]
    if not missing:
        report("ok", f"NVDEC/CUDA elements {', '.join(NVIDIA_ELEMENTS)}")
        return
    report("note", f"no {', '.join(missing)}: GPU decoding needs gstreamer1.0-plugins-bad's nvcodec and an NVIDIA "
                   "driver (libcuda, libnvcuvid); pipelines decode on the CPU without them")
