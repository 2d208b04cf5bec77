"""What the app knows of the processes it starts (workers, the model server): their stderr relayed to ours with a
tail kept, and how one ended, in words."""
from __future__ import annotations

import signal
import sys
from collections import deque
from collections.abc import Iterable
from typing import IO


def relay_stderr(stream: IO[bytes], tail: deque[str]) -> None:
    """Print what a child writes on stderr on ours (as one process would print it), keeping its last lines in
    ``tail`` (why it died); returns at the child's end."""
    with stream:
        for raw in stream:
            line = raw.decode(errors="replace")
            tail.append(line.rstrip())
            sys.stderr.write(line)


def last_line(lines: Iterable[str]) -> str:
    """The last line that is not blank, stripped ('' when none)."""
    return next((line.strip() for line in reversed(list(lines)) if line.strip()), "")


def describe_exit(rc: int, stderr: Iterable[str] = ()) -> str:
    """How a child process ended, for a user: ``killed by SIGKILL``, ``exited with code 2: <its last line>``."""
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    last = last_line(stderr)
    return f"exited with code {rc}" + (f": {last}" if last else "")
