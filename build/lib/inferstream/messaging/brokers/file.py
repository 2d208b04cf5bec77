"""A JSONL file as a "broker": each payload one line, appended; a batch counts as delivered once it is flushed and
``fsync``'ed (the demo's ``events.jsonl``; also handy for debugging a pipeline without a broker).

The connection string is the file's path (``events.jsonl``, ``/var/log/cam1.jsonl``) or a ``file://`` URL
(``file:///var/log/cam1.jsonl``). Build the endpoint with :func:`file_endpoint`: the network-broker parser
(``parse_conn_str``) wants ``host;port``. Parent directories are created. The file is opened in append mode, so a
restarted pipeline (and the Publisher's at-least-once replay) adds to it; delete it first for a fresh log. The
topic and the message key are not written: the line is the payload. A JSON text cannot hold a raw line break inside
a string, so raw CR/LF bytes in a payload are insignificant whitespace and are written as spaces, keeping one
payload per line.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlsplit

from inferstream.messaging.brokers.base import BrokerError, BrokerUnavailableError, ConnStrError, Endpoint

_EXPECTED = "'PATH' (e.g. 'events.jsonl') or 'file:///ABSOLUTE/PATH'"
_NEWLINES = bytes.maketrans(b"\r\n", b"  ")


def file_endpoint(conn_str: str) -> Endpoint:
    """Endpoint of the JSONL file broker; ``host`` holds the path.

    Raises:
        ConnStrError: empty string, a URL of another scheme or with a host, or a path naming a directory.
    """
    path = conn_str.strip()
    if "://" in path:
        url = urlsplit(path)
        if url.scheme != "file" or url.netloc not in ("", "localhost") or url.query:
            raise ConnStrError(f"file conn-str {conn_str!r}: not a local file URL; expected {_EXPECTED}")
        path = unquote(url.path)
    if not path or path.endswith(os.sep) or Path(path).is_dir():
        raise ConnStrError(f"file conn-str {conn_str!r}: no file name; expected {_EXPECTED}")
    return Endpoint("file", path, 0)


class JsonlFileClient:
    """Appends payloads to ``endpoint.host``, one per line; ``fsync=False`` skips the fsync (flush only)."""

    def __init__(self, endpoint: Endpoint, *, fsync: bool = True, **_: Any) -> None:
        self._path = Path(endpoint.host)
        self._fsync = fsync
        self._file: IO[bytes] | None = None

    def connect(self, timeout: float) -> None:
        self.close()
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self._path, "ab")  # noqa: SIM115 (held until close())
        except OSError as exc:
            raise BrokerUnavailableError(f"file {self._path}: {exc.strerror or exc}") from exc

    def publish(self, topic: str, payload: bytes, key: str | None = None) -> None:
        self.publish_batch([(topic, payload, key)])

    def publish_batch(self, messages: Sequence[tuple[str, bytes, str | None]]) -> int:
        fh = self._file
        if fh is None:
            raise BrokerError("file: not open")
        try:
            fh.write(b"".join(payload.translate(_NEWLINES) + b"\n" for _topic, payload, _key in messages))
            fh.flush()
            if self._fsync:
                os.fsync(fh.fileno())
        except OSError as exc:  # nothing confirmed: the batch is rewritten (at least once)
            raise BrokerError(f"file {self._path}: {exc.strerror or exc}") from exc
        return len(messages)

    def close(self) -> None:
        fh, self._file = self._file, None
        if fh is not None:
            with contextlib.suppress(OSError):  # close never raises
                fh.close()
