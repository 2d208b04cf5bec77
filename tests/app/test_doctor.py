"""The wheel brings its elements: built from this tree, installed into a fresh venv next to this checkout's
GStreamer, gst-inspect-1.0 finds all five after ``eval "$(inferstream env)"``. ``inferstream doctor`` names a
missing python loader and a missing GstAnalytics typelib in environments broken on purpose."""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from inferstream.gst_plugins import ELEMENTS

ROOT = Path(__file__).resolve().parents[2]


def _gst_dirs() -> tuple[Path, Path | None]:
    """The folder of the GStreamer plugins in use (the python loader's) and the GI_TYPELIB_PATH entry with Gst."""
    import gi

    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    plugin = Gst.Registry.get().find_plugin("python") or Gst.Registry.get().find_plugin("coreelements")
    typelibs = next((Path(p) for p in os.environ.get("GI_TYPELIB_PATH", "").split(os.pathsep)
                     if p and (Path(p) / "Gst-1.0.typelib").is_file()), None)
    return Path(plugin.get_filename()).parent, typelibs


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "inferstream.app.cli", "doctor"], env)


def _links(src: Path, dest: Path, skip: str, pattern: str) -> Path:
    """``dest`` holding links to every ``pattern`` file of ``src`` but ``skip``."""
    dest.mkdir()
    for f in src.glob(pattern):
        if f.name != skip:
            (dest / f.name).symlink_to(f)
    return dest


def test_doctor_reports_a_missing_python_loader(tmp_path: Path) -> None:
    plugins, _ = _gst_dirs()
    if not (plugins / "libgstpython.so").is_file():
        pytest.skip(f"no python loader in {plugins}")
    env = {**os.environ, "GST_REGISTRY": str(tmp_path / "registry.bin"),
           "GST_PLUGIN_SYSTEM_PATH": str(_links(plugins, tmp_path / "plugins", "libgstpython.so", "*.so"))}
    done = _doctor(env)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert ("problem: the GStreamer python plugin loader (libgstpython) is not found: apt-get install "
            "gstreamer1.0-python3-plugin-loader (the build of ./setup includes it)") in lines
    assert any(line.startswith("problem: elements pyinfer") and "python plugin loader" in line for line in lines)
    assert "ok: GstAnalytics typelib" in lines


def test_doctor_reports_a_missing_analytics_typelib(tmp_path: Path) -> None:
    _, typelibs = _gst_dirs()
    if typelibs is None:
        pytest.skip("the typelibs come from the default search path: GI_TYPELIB_PATH cannot hide them")
    env = {**os.environ, "GST_REGISTRY": str(tmp_path / "registry.bin"),
           "GI_TYPELIB_PATH": str(_links(typelibs, tmp_path / "typelibs", "GstAnalytics-1.0.typelib", "*.typelib"))}
    done = _doctor(env)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("problem: the GstAnalytics typelib is missing: apt-get install "
                               "gir1.2-gst-plugins-bad-1.0") for line in lines), lines
    assert lines[0].startswith("ok: GStreamer 1.")


def _wheel(tmp_path: Path) -> Path:
    """A wheel of this tree, built from a copy (the build leaves its files there, not here)."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    done = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                 "-w", str(tmp_path / "dist"), str(tree)], dict(os.environ))
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("inferstream-*.whl")
    return wheel


def test_wheel_in_a_fresh_venv_registers_all_elements_after_env(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"inferstream/gst_plugins/python/{e}.py" for e in ELEMENTS} <= set(names)
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], dict(os.environ)).returncode == 0
    done = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps",
                 "--no-index", str(wheel)], dict(os.environ))
    assert done.returncode == 0, done.stderr
    # the dependencies (gi, torch, numpy...) from the running environment, inferstream only from the wheel
    deps = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT / "src")]
    env = {k: v for k, v in os.environ.items() if k not in ("GST_PLUGIN_PATH", "INFERSTREAM_ROOT")}
    env.update(PYTHONPATH=os.pathsep.join([*deps, *site.getsitepackages()]), GST_REGISTRY=str(tmp_path / "reg.bin"),
               PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    script = ('eval "$(inferstream env)" && echo "$GST_PLUGIN_PATH" && '
              f'for e in {" ".join(ELEMENTS)}; do gst-inspect-1.0 "$e" > /dev/null || {{ echo "no $e"; exit 1; }}; '
              "done && python -c 'import gi; gi.require_version(\"Gst\", \"1.0\"); from gi.repository import Gst; "
              "Gst.init(None); import inferstream.elements.pyinfer as m; print(m.__file__)' && inferstream doctor")
    done = _run(["bash", "-c", script], env)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    packaged = next(venv.glob("lib/python*/site-packages/inferstream"))
    assert lines[0].split(":")[0] == str(packaged / "gst_plugins")
    assert lines[1] == str(packaged / "elements" / "pyinfer.py")
    assert f"ok: elements {', '.join(ELEMENTS)}" in lines
