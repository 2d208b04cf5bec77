"""Disk spool: order, acknowledgement, recovery after a crash, locking and the full policies."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferstream.messaging.spool import Message, Spool, SpoolLockedError, encode


def _msgs(start: int, n: int, size: int = 50) -> list[Message]:
    return [Message(f"t/{i % 3}", f"{i:08d}".encode() + b"x" * size, None if i % 2 else f"k{i}")
            for i in range(start, start + n)]


def _drain(spool: Spool, batch: int = 7) -> list[Message]:
    out: list[Message] = []
    while got := spool.peek(batch):
        out.extend(got)
        spool.ack(len(got))
    return out


def test_spool_roundtrip_keeps_order_and_deletes_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1000)
    msgs = _msgs(0, 100)
    assert spool.append(msgs[:60]) == 0 and spool.append(msgs[60:]) == 0
    assert len(spool) == 100 and len(list(tmp_path.glob("*.seg"))) > 3
    assert _drain(spool) == msgs
    assert len(spool) == 0 and not list(tmp_path.glob("*.seg"))
    spool.close()


def test_spool_peek_without_ack_repeats(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1 << 16)
    spool.append(_msgs(0, 5))
    assert spool.peek(3) == spool.peek(3) == _msgs(0, 3)
    spool.ack(2)
    assert spool.peek(10) == _msgs(2, 3)
    with pytest.raises(ValueError, match=r"ack\(4\) after a peek of 3 records"):
        spool.ack(4)
    spool.close()


def test_spool_reopen_resumes_after_acknowledged(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=500)
    spool.append(_msgs(0, 40))
    acked = 0
    while acked < 13:  # a peek stops at the end of a segment (7 records here)
        got = spool.peek(13 - acked)
        spool.ack(len(got))
        acked += len(got)
    spool.close()
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=500)
    assert len(again) == 27
    again.append(_msgs(40, 5))
    assert _drain(again) == _msgs(13, 32)
    again.close()


def test_spool_cuts_torn_tail(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1 << 16)
    spool.append(_msgs(0, 10))
    spool.close()
    (seg,) = tmp_path.glob("*.seg")
    with open(seg, "ab") as fh:  # a crash in the middle of writing record 11
        fh.write(encode(_msgs(10, 1)[0])[:-7])
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1 << 16)
    assert (len(again), again.corrupt) == (10, 1)
    again.append(_msgs(10, 1))
    assert _drain(again) == _msgs(0, 11)
    again.close()


def test_spool_is_locked_by_one_owner(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with pytest.raises(SpoolLockedError, match="used by another Publisher"):
        Spool(tmp_path)
    spool.close()
    Spool(tmp_path).close()


def test_spool_drop_oldest_gives_back_whole_old_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4000, segment_bytes=1000, full_policy="drop-oldest")
    msgs = _msgs(0, 100)  # 74 bytes each: 7400 bytes do not fit
    dropped = sum(spool.append(msgs[i:i + 10]) for i in range(0, 100, 10))
    kept = _drain(spool)
    assert dropped + len(kept) == 100 and dropped > 0
    assert kept == msgs[dropped:]  # the newest survive, in order
    spool.close()


def test_spool_drop_newest_refuses_what_does_not_fit(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4000, segment_bytes=1000, full_policy="drop-newest")
    msgs = _msgs(0, 100)
    dropped = sum(spool.append(msgs[i:i + 10]) for i in range(0, 100, 10))
    kept = _drain(spool)
    assert kept == msgs[:len(kept)] and dropped == 100 - len(kept) and spool.bytes == 0
    assert len(kept) == 4000 // len(encode(msgs[0]))
    spool.close()


def test_spool_drop_oldest_keeps_newest_of_an_oversized_batch(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=2000, segment_bytes=1000)
    msgs = _msgs(0, 50)
    dropped = spool.append(msgs)
    assert _drain(spool) == msgs[dropped:] and dropped == 50 - 2000 // len(encode(msgs[0]))
    spool.close()


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"max_bytes": 100, "segment_bytes": 80}, "segment_bytes <= max_bytes / 2"),
    ({"segment_bytes": 0}, "0 < segment_bytes"),
    ({"fsync": "sometimes"}, "fsync must be 'write' or 'never'"),
    ({"full_policy": "block"}, "full_policy must be 'drop-oldest' or 'drop-newest'"),
])
def test_spool_rejects_bad_settings(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Spool(tmp_path, **kwargs)


def test_encode_rejects_huge_topic() -> None:
    with pytest.raises(ValueError, match="topic and key must be shorter than 65535 bytes"):
        encode(Message("t" * 70000, b""))


@pytest.mark.parametrize("policy", ["drop-oldest", "drop-newest"])
def test_spool_full_disk_applies_policy_and_never_tears_a_record(small_fs: Path, policy: str) -> None:
    """A real filesystem running out of space (ENOSPC) mid-append: no OSError escapes, every message is either
    kept whole or counted as dropped, and reopening reads back exactly the kept ones (no torn tail)."""
    spool = Spool(small_fs / "spool", max_bytes=1 << 30, segment_bytes=8 << 10, full_policy=policy, fsync="write")
    dropped = sum(spool.append(_msgs(start, 25, size=200)) for start in range(0, 2000, 25))
    kept = len(spool)
    assert spool.write_errors > 0 and spool.last_error is not None and spool.last_error.errno == 28
    assert dropped > 0 and kept > 0 and dropped + kept == 2000
    spool.close()
    reopened = Spool(small_fs / "spool", max_bytes=1 << 30, segment_bytes=8 << 10, full_policy=policy)
    assert reopened.corrupt == 0 and len(reopened) == kept
    seqs = [int(m.payload[:8]) for m in _drain(reopened)]
    # drop-oldest gave back whole old segments: the newest survive; drop-newest refused what came last
    expected = list(range(2000 - kept, 2000)) if policy == "drop-oldest" else list(range(kept))
    assert seqs == expected
    reopened.close()
