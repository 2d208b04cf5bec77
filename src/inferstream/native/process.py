"""The process's tie to its parent, through libc's ``prctl``."""
from __future__ import annotations

import ctypes
import signal
from typing import Final

PR_SET_PDEATHSIG: Final = 1


def die_with_parent(sig: signal.Signals) -> None:
    """Ask the kernel for ``sig`` when the parent dies (Linux only; elsewhere nothing: a closing pipe is all).

    A worker asks for SIGUSR2 (it finishes its files), the app's model server for SIGUSR1 (it serves the workers
    until they are gone, then ends): none is left running when the app that started it is killed. The kernel may
    send it more than once (each time the child is handed to another thread of the dying parent): a handler must
    take it once."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):
        pass
