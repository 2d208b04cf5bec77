"""native.cc: C helpers built with the machine's compiler on first use, cached by content; None (callers keep their
Python loops) when there is no compiler or the source does not build."""
from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from inferstream.native import cc

SOURCE = "int add_twice(int a, int b) { return a + 2 * b; }\n"


@pytest.fixture(autouse=True)
def build_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(cc, "_build_dir", lambda: tmp_path)
    cc.load_c.cache_clear()
    yield tmp_path
    cc.load_c.cache_clear()


def test_a_source_is_built_once_and_called(build_dir: Path) -> None:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here")
    lib = cc.load_c("demo", SOURCE)
    assert lib is not None and lib.add_twice(3, 4) == 11
    built = list(build_dir.glob("demo-*.so"))
    assert len(built) == 1
    cc.load_c.cache_clear()
    stamp = built[0].stat().st_mtime_ns
    assert cc.load_c("demo", SOURCE) is not None and built[0].stat().st_mtime_ns == stamp  # reused
    assert isinstance(lib, ctypes.PyDLL)


def test_no_compiler_means_none(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with caplog.at_level("INFO", logger="inferstream.native.cc"):
        assert cc.load_c("demo", SOURCE) is None
    assert "no C compiler" in caplog.text


def test_a_broken_source_means_none_with_the_compiler_message(caplog: pytest.LogCaptureFixture) -> None:
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here")
    assert cc.load_c("broken", "int f(void) { return undefined_name; }\n") is None
    assert "could not build broken" in caplog.text and "undefined_name" in caplog.text


def test_a_missing_compiler_named_by_cc_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert cc.load_c("demo", SOURCE) is None


def test_an_unloadable_cached_library_means_none(build_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = cc.library_path("demo", SOURCE)
    assert target.parent == build_dir
    target.write_bytes(b"not an ELF file")
    assert cc.load_c("demo", SOURCE) is None
    assert "could not load" in caplog.text
