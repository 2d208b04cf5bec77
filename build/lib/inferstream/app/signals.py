"""Stop requests for a run: SIGINT (Ctrl-C), SIGTERM (``docker stop``, systemd) and SIGHUP (a closed terminal) are
counted instead of killing the process, so the runner can send EOS through every stream and finish the files. The
first signal asks for a clean stop, a second one (any of them) for an immediate one; the exit code is the shell's
convention for the first: 128 + its number (130, 143, 129)."""
from __future__ import annotations

import signal
import threading
from typing import Any, Final

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopSignals:
    """Counts the stop signals received while installed (main thread only: elsewhere signals cannot be caught)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum: int, _frame: object) -> None:
            self.request(signal.Signals(signum))
        for sig in STOP_SIGNALS:
            previous = signal.signal(sig, on_signal)
            # None: set from C, not restorable; SIGINT then falls back to Python's KeyboardInterrupt
            self._previous[sig] = previous if previous is not None else (
                signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)

    def request(self, sig: signal.Signals = signal.SIGINT) -> None:
        """Count a stop request as if ``sig`` had arrived."""
        self.count += 1
        if self.first is None:
            self.first = sig

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    @property
    def name(self) -> str:
        """How the messages call the first signal: ``Ctrl-C`` for SIGINT, else its name."""
        return "Ctrl-C" if self.first in (None, signal.SIGINT) else self.first.name

    @property
    def again(self) -> str:
        return "Ctrl-C again" if self.name == "Ctrl-C" else f"send {self.name} again"

    @property
    def exit_code(self) -> int:
        return 128 + int(self.first or signal.SIGINT)

