"""native.structs: every hand-declared GStreamer struct has the offsets and size the C compiler gives for the
installed headers; GstCudaMemory (whose headers need the CUDA toolkit) is pinned to GStreamer 1.28.6's, and the
version guard refuses a GStreamer its layout was not checked for."""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from inferstream.errors import UnsupportedFormatError
from inferstream.native import cuda
from inferstream.native.gst import gst_version
from inferstream.native.structs import (
    CUDA_MEMORY_LAYOUT_VERSIONS,
    GstBufferHeadC,
    GstCudaMemoryC,
    GstMapInfoC,
    GstMemoryC,
    GstMiniObjectC,
    GstVideoInfoC,
    check_cuda_memory_layout,
)

# (ctypes struct, C type, fields compared): every field of each struct, and its size
CHECKED = [
    (GstMiniObjectC, "GstMiniObject", [name for name, _ in GstMiniObjectC._fields_]),
    (GstBufferHeadC, "GstBuffer", ["mini_object", "pool", "pts"]),  # the head only: sizeof is the C struct's
    (GstMapInfoC, "GstMapInfo", [name for name, _ in GstMapInfoC._fields_]),
    (GstMemoryC, "GstMemory", [name for name, _ in GstMemoryC._fields_]),
    (GstVideoInfoC, "GstVideoInfo", [name for name, _ in GstVideoInfoC._fields_ if name != "_abi"]),
]


def _c_layouts(tmp_path: Path) -> dict[str, int]:
    """offsetof / sizeof as the C compiler sees the installed headers (skips without a compiler or headers)."""
    cc, pkg = shutil.which("cc") or shutil.which("gcc"), shutil.which("pkg-config")
    if cc is None or pkg is None:
        pytest.skip("needs a C compiler and pkg-config")
    env = dict(os.environ)
    if "GST_PREFIX" in env:  # ./setup's own build (its .pc files are not on the default search path)
        env["PKG_CONFIG_PATH"] = os.pathsep.join(filter(None, [f"{env['GST_PREFIX']}/lib/pkgconfig",
                                                              env.get("PKG_CONFIG_PATH")]))
    flags = subprocess.run([pkg, "--cflags", "gstreamer-video-1.0"], capture_output=True, text=True, check=False,
                           env=env)
    if flags.returncode != 0:
        pytest.skip(f"no GStreamer headers here: {flags.stderr.strip()}")
    lines = [f'printf("{ctype} sizeof %zu\\n", sizeof({ctype}));' for _, ctype, _ in CHECKED]
    lines += [f'printf("{ctype} {f} %zu\\n", offsetof({ctype}, {"_gst_reserved" if f == "_abi" else f}));'
              for _, ctype, names in CHECKED for f in names]
    src = tmp_path / "layouts.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <gst/gst.h>\n#include <gst/video/video.h>\n"
                   "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    exe = tmp_path / "layouts"
    subprocess.run([cc, *flags.stdout.split(), "-o", str(exe), str(src)], check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {" ".join(line.split()[:2]): int(line.split()[2]) for line in out.splitlines()}


def test_core_layouts_match_the_installed_headers(tmp_path: Path) -> None:
    c = _c_layouts(tmp_path)
    for struct, ctype, names in CHECKED:
        for name in names:
            assert getattr(struct, name).offset == c[f"{ctype} {name}"], f"{ctype}.{name}"
        if struct is not GstBufferHeadC:
            assert ctypes.sizeof(struct) == c[f"{ctype} sizeof"], ctype


def test_cuda_memory_layout_is_gstreamer_1_28s() -> None:
    # offsetof / sizeof printed by a C program compiled against GStreamer 1.28.6's gst/cuda/gstcudamemory.h (x86_64)
    assert ctypes.sizeof(GstMemoryC) == 112 and ctypes.sizeof(GstVideoInfoC) == 152
    assert (GstCudaMemoryC.context.offset, GstCudaMemoryC.info.offset) == (112, 120)
    assert ctypes.sizeof(GstCudaMemoryC) == 312


def test_map_cuda_flag_value() -> None:
    assert cuda.GST_MAP_CUDA == 0x20000 and cuda.GST_MAP_READ | cuda.GST_MAP_CUDA == 0x20001


def test_the_version_guard_takes_the_checked_releases_and_refuses_others() -> None:
    oldest, newest = CUDA_MEMORY_LAYOUT_VERSIONS
    for version in (oldest, (1, 26), newest):
        check_cuda_memory_layout(version)
    assert oldest <= gst_version() <= newest  # the GStreamer these tests run on is one of them
    for version in ((1, 22), (newest[0], newest[1] + 1), (2, 0)):
        with pytest.raises(UnsupportedFormatError, match=rf"known for GStreamer 1.24 to 1.28, this is "
                                                         rf"{version[0]}.{version[1]}: put cudadownload"):
            check_cuda_memory_layout(version)
