"""SIGINT and SIGTERM end a run cleanly instead of killing it mid-write.

The first signal only sets a flag: the serving loop stops at the next step
boundary, and the run writes and logs what it measured, then ends KILLED. A
second signal (the user insists) exits at once, skipping that cleanup.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """A run stopped by a signal after saving its partial results."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


class Interrupts:
    """Context manager: while inside, SIGINT/SIGTERM set `signum` instead of killing the process."""

    def __init__(self):
        self.signum: int | None = None
        self._previous = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def handle(self, signum: int, frame=None) -> None:
        if self.signum is not None:
            print(f"chunklab: second signal ({signal.Signals(signum).name}): exiting now, partial results "
                  "may be incomplete", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.signum = signum
        print(f"chunklab: {signal.Signals(signum).name} received: stopping after the current step and saving "
              "what was measured (send it again to exit at once)", file=sys.stderr, flush=True)

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():  # Python allows handlers only there
            self._previous = {s: signal.signal(s, self.handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous = {}
