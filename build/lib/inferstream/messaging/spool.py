"""Disk spool: append-only segment files of messages that no broker has confirmed yet, oldest first.

Layout of a spool directory::

    .lock                  flock'ed by the one Publisher using the directory (a second one gets SpoolLockedError)
    000000000001.seg ...   segments, replayed in name order; a segment is deleted once all its records are confirmed
    cursor                 "<segment> <offset>": first unconfirmed record of the oldest segment (replaced atomically)

Record: ``crc32 u32 | payload_len u32 | topic_len u16 | key_len u16 (0xFFFF = no key) | topic | key | payload``,
little-endian, the CRC covering everything after it. A record cut short by a crash (or failing its CRC) ends the
segment: the tail is truncated when the spool is opened, and the records lost that way are counted in
``Spool.corrupt``.

Durability (``fsync``):

* ``"write"`` (default): every :meth:`Spool.append` call ends with ``fsync`` of the segment (and of the directory
  when it created a segment). What was appended survives a power cut. The Publisher appends in chunks, so this is
  one fsync per chunk, only while the broker is away.
* ``"never"``: left to the OS page cache. Survives a killed process (``kill -9``), not a power cut.

The ``cursor`` file is never fsynced: after a power cut it may point at an older record, which replays messages
that were already confirmed: duplicates, never losses. A full spool (``max_bytes``) applies the ``full_policy``:
``"drop-oldest"`` deletes the oldest whole segment (its unconfirmed records are counted as dropped),
``"drop-newest"`` refuses the records being appended (counted as dropped).

A full or failing disk (``ENOSPC``, ``EIO``) is handled the same way instead of raising: the partial record is cut
off again, ``drop-oldest`` gives back the oldest segments and retries, ``drop-newest`` drops what did not fit, and
the failures are counted in ``write_errors``. A segment is the unit drop-oldest gives back, so keep segments small
next to the free space (pymsgbroker does).
"""
from __future__ import annotations

import fcntl
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, Literal, NamedTuple

from inferstream.errors import InferstreamError

FsyncPolicy = Literal["write", "never"]
FullPolicy = Literal["drop-oldest", "drop-newest"]
_HEAD: Final = struct.Struct("<IIHH")  # crc, payload_len, topic_len, key_len
_NO_KEY: Final = 0xFFFF
_Blobs = Sequence[bytes]  # encoded records (module level: Spool.bytes shadows the builtin in the class)


class SpoolLockedError(InferstreamError):
    """Another live process (or Publisher) owns this spool directory."""


class Message(NamedTuple):
    """One message as it travels: also a ``(topic, payload, key)`` tuple for ``BrokerClient.publish_batch``."""

    topic: str
    payload: bytes
    key: str | None = None


def encode(msg: Message) -> bytes:
    topic = msg.topic.encode()
    key = b"" if msg.key is None else msg.key.encode()
    if len(topic) >= 0xFFFF or len(key) >= 0xFFFF:
        raise ValueError(f"topic and key must be shorter than 65535 bytes, got {len(topic)} and {len(key)}")
    body = struct.pack("<IHH", len(msg.payload), len(topic), _NO_KEY if msg.key is None else len(key)) \
        + topic + key + msg.payload
    return struct.pack("<I", zlib.crc32(body)) + body


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_records(fh: BinaryIO, offset: int) -> Iterator[tuple[Message, int]]:
    """(message, offset after it) from ``offset`` until the end or the first torn/corrupt record."""
    fh.seek(offset)
    while True:
        head = fh.read(_HEAD.size)
        if len(head) < _HEAD.size:
            return
        crc, plen, tlen, klen = _HEAD.unpack(head)
        rest = fh.read(tlen + (0 if klen == _NO_KEY else klen) + plen)
        if len(rest) != tlen + (0 if klen == _NO_KEY else klen) + plen or zlib.crc32(head[4:] + rest) != crc:
            return
        topic = rest[:tlen].decode()
        key = None if klen == _NO_KEY else rest[tlen:tlen + klen].decode()
        offset += _HEAD.size + len(rest)
        yield Message(topic, rest[len(rest) - plen:], key), offset


@dataclass(slots=True)
class _Segment:
    seq: int
    path: Path
    size: int  # bytes in the file
    records: int  # unconfirmed records in it


class Spool:
    """FIFO of messages on disk; used by one thread (the Publisher's worker).

    Args:
        directory: created if missing; leftovers of an earlier run are picked up (oldest first).
        max_bytes: bound on the bytes of all segments.
        segment_bytes: a new segment is started once the current one reaches this size; must be at most half of
            ``max_bytes`` so that drop-oldest always has a whole segment to give back.
        fsync: ``"write"`` or ``"never"``, see the module docstring.
        full_policy: ``"drop-oldest"`` or ``"drop-newest"``, see the module docstring.

    Raises:
        ValueError: sizes or policies out of range.
        SpoolLockedError: the directory is in use.
    """

    def __init__(self, directory: str | Path, *, max_bytes: int = 1 << 30, segment_bytes: int = 16 << 20,
                 fsync: FsyncPolicy = "write", full_policy: FullPolicy = "drop-oldest") -> None:
        if segment_bytes <= 0 or max_bytes < 2 * segment_bytes:
            raise ValueError(f"need 0 < segment_bytes <= max_bytes / 2, got {segment_bytes} and {max_bytes}")
        if fsync not in ("write", "never"):
            raise ValueError(f"fsync must be 'write' or 'never', got {fsync!r}")
        if full_policy not in ("drop-oldest", "drop-newest"):
            raise ValueError(f"full_policy must be 'drop-oldest' or 'drop-newest', got {full_policy!r}")
        self.dir: Final = Path(directory)
        self.max_bytes: Final = max_bytes
        self.segment_bytes: Final = segment_bytes
        self.fsync: Final = fsync
        self.full_policy: Final = full_policy
        self.corrupt = 0  # records lost to torn / corrupt tails found when opening
        self.appended = 0  # records written since opening
        self.write_errors = 0  # writes the disk refused (ENOSPC, EIO, ...); the last one in last_error
        self.last_error: OSError | None = None
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.dir / ".lock", "a+b")  # noqa: SIM115 (held, and locked, until close())
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise SpoolLockedError(f"spool {self.dir} is used by another Publisher or process") from None
        self._segments: list[_Segment] = []
        self._cursor = 0  # offset of the first unconfirmed record in self._segments[0]
        self._writer: BinaryIO | None = None
        self._reader: BinaryIO | None = None
        self._peeked: list[int] = []  # end offsets (in the first segment) of the last peek
        self._recover()

    # -- opening ---------------------------------------------------------------------------------------------
    def _recover(self) -> None:
        seqs = sorted(int(p.stem) for p in self.dir.glob("*.seg") if p.stem.isdigit())
        cur_seq, cur_off = self._read_cursor()
        for seq in seqs:
            path = self._path(seq)
            if seq < cur_seq:
                path.unlink()
                continue
            with open(path, "rb") as fh:
                start = min(cur_off, os.fstat(fh.fileno()).st_size) if seq == cur_seq else 0
                records, end = 0, start
                for _, end in _read_records(fh, start):
                    records += 1
                size = os.fstat(fh.fileno()).st_size
            if end < size:  # torn or corrupt tail: cut it off
                self.corrupt += 1
                os.truncate(path, end)
                size = end
            if not self._segments:
                self._cursor = start
            self._segments.append(_Segment(seq, path, size, records))
        self._drop_empty_head()

    def _read_cursor(self) -> tuple[int, int]:
        try:
            seq, off = (self.dir / "cursor").read_text().split()
            return int(seq), int(off)
        except (OSError, ValueError):
            return 0, 0

    def _write_cursor(self) -> None:
        """Replace the cursor file; when the disk refuses, the old cursor stays (it replays: duplicates only)."""
        seq = self._segments[0].seq if self._segments else 0
        tmp = self.dir / "cursor.tmp"
        try:
            tmp.write_text(f"{seq} {self._cursor if self._segments else 0}\n")
            os.replace(tmp, self.dir / "cursor")
        except OSError as exc:
            self._disk_error(exc)

    def _path(self, seq: int) -> Path:
        return self.dir / f"{seq:012d}.seg"

    # -- state -----------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Unconfirmed records on disk."""
        return sum(s.records for s in self._segments)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self._segments)

    # -- writing ---------------------------------------------------------------------------------------------
    def append(self, messages: Sequence[Message]) -> int:
        """Append in order; returns how many records were dropped (old ones or these) to respect ``max_bytes`` or
        because the disk refused them (full, failing: ``write_errors``). Never raises OSError and never leaves a
        partial record behind: what was not written whole is cut off again, so every counted record reads back."""
        if not messages:
            return 0
        blobs = [encode(m) for m in messages]
        dropped = 0
        if self.full_policy == "drop-newest":
            room, keep = self.max_bytes - self.bytes, 0
            while keep < len(blobs) and len(blobs[keep]) <= room:
                room -= len(blobs[keep])
                keep += 1
            dropped, blobs = len(blobs) - keep, blobs[:keep]
        else:
            total, first = 0, len(blobs)  # a batch larger than the whole spool keeps its newest records
            while first > 0 and total + len(blobs[first - 1]) <= self.max_bytes:
                first -= 1
                total += len(blobs[first])
            dropped, blobs = first, blobs[first:]
            while self._segments and self.bytes + total > self.max_bytes:
                dropped += self._drop_oldest()
        written = self._write(blobs)
        while written < len(blobs) and self.full_policy == "drop-oldest" and len(self._segments) > 1:
            dropped += self._drop_oldest()  # the disk is full: give back the oldest segment, try again
            written += self._write(blobs[written:])
        self.appended += written
        return dropped + len(blobs) - written

    def _write(self, blobs: _Blobs) -> int:
        """Write whole records, rolling segments; stops at the first OSError and returns how many were written."""
        done, created = 0, False
        try:
            while done < len(blobs):
                if self._writer is None or self._segments[-1].size >= self.segment_bytes:
                    created |= self._roll()
                room, end = self.segment_bytes - self._segments[-1].size, done
                while end < len(blobs) and room > 0:  # the record that crosses segment_bytes still goes here
                    room -= len(blobs[end])
                    end += 1
                whole = self._write_chunk(blobs[done:end])
                done += whole
                if done < end:
                    break
        except OSError as exc:
            self._disk_error(exc)
        if self._writer is not None and self.fsync == "write" and done:
            try:
                os.fsync(self._writer.fileno())
                if created:
                    _fsync_dir(self.dir)
            except OSError as exc:  # the records are whole in the page cache; their durability is not known
                self._disk_error(exc)
        return done

    def _write_chunk(self, blobs: _Blobs) -> int:
        """One write of records to the current segment; returns how many were written whole. On OSError the
        partial tail is cut off again and the error counted."""
        assert self._writer is not None
        seg, data = self._segments[-1], b"".join(blobs)
        written = 0
        try:
            with memoryview(data) as view:
                while written < len(data):
                    written += self._writer.write(view[written:]) or 0
        except OSError as exc:
            self._disk_error(exc)
            whole = keep = 0
            while whole < len(blobs) and keep + len(blobs[whole]) <= written:
                keep += len(blobs[whole])
                whole += 1
            seg.records += whole
            try:
                os.ftruncate(self._writer.fileno(), seg.size + keep)  # shrinking needs no space
                seg.size += keep
            except OSError:  # the partial record stays: seal the segment (reading stops before it), start anew
                seg.size += written
                self._writer.close()
                self._writer = None
            return whole
        seg.size += len(data)
        seg.records += len(blobs)
        return len(blobs)

    def _disk_error(self, exc: OSError) -> None:
        self.write_errors += 1
        self.last_error = exc

    def _roll(self) -> bool:
        if self._writer is not None:
            if self.fsync == "write":
                try:
                    os.fsync(self._writer.fileno())
                except OSError as exc:
                    self._disk_error(exc)
            self._writer.close()
            self._writer = None
        seq = self._segments[-1].seq + 1 if self._segments else self._read_cursor()[0] + 1
        path = self._path(seq)
        self._writer = open(path, "ab", buffering=0)  # noqa: SIM115 (the open segment, closed on rotation)
        self._segments.append(_Segment(seq, path, 0, 0))
        return True

    def _drop_oldest(self) -> int:
        if len(self._segments) == 1 and self._writer is not None:  # it is the segment being written: close it
            self._writer.close()
            self._writer = None
        seg = self._pop_head()
        self._write_cursor()
        return seg.records

    def _pop_head(self) -> _Segment:
        """Remove the oldest segment: its file, the reader on it and the read position in it."""
        seg = self._segments.pop(0)
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        seg.path.unlink(missing_ok=True)
        self._cursor = 0
        self._peeked.clear()
        return seg

    # -- reading ---------------------------------------------------------------------------------------------
    def peek(self, n: int) -> list[Message]:
        """Up to ``n`` oldest unconfirmed records (all from the oldest non-empty segment), without removing them."""
        self._drop_empty_head()
        self._peeked = []
        if not self._segments:
            return []
        seg = self._segments[0]
        if self._writer is not None and seg is self._segments[-1]:
            self._writer.flush()
        if self._reader is None:
            self._reader = open(seg.path, "rb")  # noqa: SIM115 (the read segment, closed when consumed)
        out: list[Message] = []
        for msg, end in _read_records(self._reader, self._cursor):
            out.append(msg)
            self._peeked.append(end)
            if len(out) >= n:
                break
        return out

    def ack(self, n: int) -> None:
        """Mark the first ``n`` records of the last :meth:`peek` as confirmed."""
        if n <= 0:
            return
        if n > len(self._peeked):
            raise ValueError(f"ack({n}) after a peek of {len(self._peeked)} records")
        self._cursor = self._peeked[n - 1]
        del self._peeked[:n]
        self._segments[0].records -= n
        self._drop_empty_head()
        self._write_cursor()

    def _drop_empty_head(self) -> None:
        while self._segments and self._segments[0].records == 0:
            if len(self._segments) == 1 and self._writer is not None:  # it is the segment being written
                self._writer.close()
                self._writer = None
            self._pop_head()

    def close(self) -> None:
        """Close files and release the directory lock (the data stays for the next Publisher)."""
        for fh in (self._writer, self._reader):
            if fh is not None:
                fh.close()
        self._writer = self._reader = None
        if self._segments:
            self._write_cursor()
        self._lock.close()
