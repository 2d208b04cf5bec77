"""setup's download step (tools/fetch-gst-sources.sh) end to end against a real HTTP server on loopback serving
copies of the pinned tarballs in GStreamer's src/<module>/<file> layout: good files are downloaded and verified,
a corrupted copy is refused and not kept, a server that is down is one line, files already present are only
checked."""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "fetch-gst-sources.sh"
SUMS = dict(reversed(line.split()) for line in (ROOT / "tools" / "gst-sources.sha256").read_text().splitlines())
# where ./setup finds the tarballs: GST_SOURCES_DIR, else ../shared/deps next to the checkout
SHARED = Path(os.environ.get("GST_SOURCES_DIR") or ROOT.parent / "shared" / "deps" / "gstreamer-1.28.6")


def _module(file: str) -> str:
    return file.rsplit("-", 1)[0]


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """A copy of GStreamer's src/ tree holding the pinned tarballs."""
    if not all((SHARED / f).is_file() for f in SUMS):
        pytest.skip(f"the pinned tarballs are not in {SHARED}")
    root = tmp_path / "mirror"
    for file in SUMS:
        (root / _module(file)).mkdir(parents=True)
        shutil.copyfile(SHARED / file, root / _module(file) / file)
    return root


@pytest.fixture
def server(mirror: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(mirror))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _fetch(dest: Path, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GST_SOURCES_URL": url}
    return subprocess.run(["bash", str(SCRIPT), str(dest)], env=env, capture_output=True, text=True, timeout=120, check=False)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_downloads_every_pinned_tarball_and_verifies_it(tmp_path: Path, server: str) -> None:
    dest = tmp_path / "sources"
    done = _fetch(dest, server)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in dest.iterdir()) == sorted(SUMS)
    assert {p.name: _sha256(p) for p in dest.iterdir()} == SUMS
    assert done.stdout.count("downloading") == len(SUMS) and done.stderr == ""


def test_fetch_refuses_a_corrupted_download_and_keeps_nothing_of_it(tmp_path: Path, mirror: Path,
                                                                    server: str) -> None:
    bad = mirror / "orc" / "orc-0.4.42.tar.xz"
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    dest = tmp_path / "sources"
    done = _fetch(dest, server)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert f"{server}/orc/orc-0.4.42.tar.xz does not match its pinned SHA256 nor a published" in done.stderr
    assert "not kept" in done.stderr
    assert not (dest / "orc-0.4.42.tar.xz").exists() and not list(dest.glob(".*.part"))


def test_fetch_with_the_server_down_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _fetch(tmp_path / "sources", f"http://127.0.0.1:{port}")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"fetch-gst-sources: cannot download http://127.0.0.1:{port}/")
    assert "set GST_SOURCES_URL" in done.stderr


def test_fetch_only_checks_files_already_there(tmp_path: Path, mirror: Path) -> None:
    dest = tmp_path / "sources"
    dest.mkdir()
    for file in SUMS:
        shutil.copyfile(mirror / _module(file) / file, dest / file)
    done = _fetch(dest, "http://127.0.0.1:9")  # would fail if anything were downloaded
    assert done.returncode == 0 and "downloading" not in done.stdout, done.stderr
    (dest / "gst-python-1.28.6.tar.xz").write_bytes(b"not the tarball")
    done = _fetch(dest, "http://127.0.0.1:9")
    assert done.returncode == 1 and done.stderr.count("\n") == 1
    assert "gst-python-1.28.6.tar.xz does not match its pinned SHA256" in done.stderr and "remove it" in done.stderr


@pytest.mark.parametrize("published_matches", [True, False])
def test_fetch_accepts_the_release_sites_own_tarball_by_its_published_sum(
        tmp_path: Path, mirror: Path, server: str, published_matches: bool) -> None:
    """The release site's tarballs are packed differently from the pinned offline copies: a file whose bytes differ
    from the pinned sum is kept only when it matches the ``<file>.sha256sum`` the site publishes beside it."""
    repacked = mirror / "orc" / "orc-0.4.42.tar.xz"
    repacked.write_bytes(repacked.read_bytes() + b"\0" * 512)  # other bytes, as another packing gives
    published = _sha256(repacked) if published_matches else "0" * 64
    (mirror / "orc" / "orc-0.4.42.tar.xz.sha256sum").write_text(f"{published}  orc-0.4.42.tar.xz\n")
    dest = tmp_path / "sources"
    done = _fetch(dest, server)
    if published_matches:
        assert done.returncode == 0, done.stderr
        assert _sha256(dest / "orc-0.4.42.tar.xz") == published and "published beside it" in done.stdout
    else:
        assert done.returncode == 1 and "nor a published orc-0.4.42.tar.xz.sha256sum" in done.stderr
        assert not (dest / "orc-0.4.42.tar.xz").exists()
