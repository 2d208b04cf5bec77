"""The process's tie to its parent: libc's ``prctl`` for the parent's death, and output nobody reads any more."""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from typing import IO, Any, Final

PR_SET_PDEATHSIG: Final = 1


def die_with_parent(sig: signal.Signals) -> None:
    """Ask the kernel for ``sig`` when the parent dies (Linux only; elsewhere nothing: a closing pipe is all).

    A worker asks for SIGUSR2 (it finishes its files), the app's model server for SIGUSR1 (it serves the workers
    until they are gone, then ends): none is left running when the app that started it is killed. The kernel may
    send it more than once (each time the child is handed to another thread of the dying parent): a handler must
    take it once."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))


def discard_output(*streams: IO[Any]) -> None:
    """Send what is still written to ``streams`` (stdout, stderr: pipes to a parent that died) to /dev/null: a
    write into a pipe nobody reads fails (EPIPE), which must not stop a process finishing its work."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            for stream in streams:
                os.dup2(null, stream.fileno())
        finally:
            os.close(null)
