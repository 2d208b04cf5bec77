"""Custom metas registered from many streaming threads at once, as a worker with one pymsgconv per stream does on its
first frames: each name registered once (no GLib warning of a second registration), every thread gets the same API
type, and payloads attached from every thread at once read back. Run in a fresh process, where nothing is registered
yet (a CI run once failed a cluster test on "integer expected": a racing registration looked up NULL)."""
from __future__ import annotations

import subprocess
import sys

RACE = r'''
import threading
import gi
gi.require_version("Gst", "1.0")
from gi.repository import Gst
Gst.init(None)
from inferstream.meta import _custom
from inferstream.meta.payload import attach_payloads, read_payloads

THREADS, NAMES = 8, [f"inferstream-race-{i}" for i in range(300)]
gate, apis, read, errors = threading.Barrier(THREADS), {}, {}, []

def stream(t):
    gate.wait()
    try:
        buf = Gst.Buffer.new()
        attach_payloads(buf, [b'{"t":%d}' % t], schema="s", stream_id=f"cam{t}", frame=t)
        read[t] = read_payloads(buf)
        apis[t] = [_custom.register(n) for n in NAMES]
    except Exception as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=stream, args=(t,)) for t in range(THREADS)]
for th in threads: th.start()
for th in threads: th.join()
assert not errors, errors
assert len({tuple(a) for a in apis.values()}) == 1 and len(set(apis[0])) == len(NAMES), "API types differ"
assert all([(p.stream_id, p.frame, p.payloads) for p in read[t]] == [(f"cam{t}", t, (b'{"t":%d}' % t,))]
           for t in range(THREADS)), read
print("ok")
'''


def test_custom_metas_registered_from_eight_threads_at_once_once_each_and_read_back() -> None:
    run = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
    assert "Warning" not in run.stderr and "CRITICAL" not in run.stderr, run.stderr  # a second registration warns
