"""C helpers compiled with the machine's C compiler on first use, cached, loaded through ``ctypes.PyDLL``.

For loops of short C calls that Python would make one ctypes call at a time (GstAnalytics writes: two calls per
box and frame). The sources are self-contained (they declare what they call and receive the function pointers
from Python), so they need no headers and link against nothing: ``cc -O2 -shared -fPIC`` is the whole build.
Where no compiler exists the callers keep their Python loops (one info line says so).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_log = logging.getLogger(__name__)
# no fused multiply-add (the default where the target has it, e.g. aarch64): compiled arithmetic that must give
# numpy's doubles (the tracker's) keeps every rounding step
_FLAGS = ("-O2", "-ffp-contract=off", "-shared", "-fPIC")


def _build_dir() -> Path:
    from inferstream.cache import cache_dir

    return cache_dir() / "native"


@functools.cache
def load_c(name: str, source: str) -> ctypes.PyDLL | None:
    """The shared library built from C ``source`` (cached by content), or None when it cannot be built.

    Args:
        name: a file-name stem, for the cache and messages.
        source: the C translation unit.
    """
    target = library_path(name, source)
    if not target.is_file():
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        if compiler is None:
            _log.info("no C compiler (cc, gcc, clang or $CC): %s runs as Python loops", name)
            return None
        try:
            _compile(compiler, source, target)
        except (OSError, subprocess.SubprocessError) as exc:
            _log.warning("could not build %s (%s): it runs as Python loops", name, exc)
            return None
    try:
        return ctypes.PyDLL(str(target))
    except OSError as exc:  # e.g. a cache file another machine's compiler wrote
        _log.warning("could not load %s (%s): it runs as Python loops", target, exc)
        return None


def library_path(name: str, source: str) -> Path:
    """Where ``load_c`` keeps the library built from ``source``: named by the source and the build flags."""
    digest = hashlib.sha256(" ".join([*_FLAGS, source]).encode()).hexdigest()[:16]
    return _build_dir() / f"{name}-{digest}.so"


def _compile(compiler: str, source: str, target: Path) -> None:
    """Build into a temporary file and rename it into place (processes building at once do not collide)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src, out = Path(tmp) / "src.c", Path(tmp) / "out.so"
        src.write_text(source)
        done = subprocess.run([compiler, *_FLAGS, "-o", str(out), str(src), "-lm"], check=False,
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip()[-500:] or f"{compiler} exited {done.returncode}")
        os.replace(out, target)
