"""Run clocks. Both measure real compute; they differ only in idle time.

- WallClock: real elapsed time since start(); waiting for the next arrival sleeps.
- ReplayClock: real elapsed time since start() minus idle gaps, which it jumps
  over instead of sleeping. Every step still costs its measured duration, so
  latencies are what a wall run would see, without waiting for nothing.
"""
from __future__ import annotations

import time


class WallClock:
    def __init__(self):
        self._t0 = time.perf_counter()

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self._t0

    def wait_until(self, t_s: float) -> None:
        delay = t_s - self.now()
        if delay > 0:
            time.sleep(delay)


class ReplayClock(WallClock):
    def __init__(self):
        super().__init__()
        self._skipped_s = 0.0

    def start(self) -> None:
        super().start()
        self._skipped_s = 0.0

    def now(self) -> float:
        return super().now() + self._skipped_s

    def wait_until(self, t_s: float) -> None:
        self._skipped_s += max(0.0, t_s - self.now())


def make_clock(kind: str) -> WallClock:
    return ReplayClock() if kind == "replay" else WallClock()
