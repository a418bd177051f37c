"""Run clocks. Wall and replay measure real compute and differ only in idle time;
the simulated clock measures nothing and moves only when told.

- WallClock: real elapsed time since start(); waiting for the next arrival sleeps.
- ReplayClock: real elapsed time since start() minus idle gaps, which it jumps
  over instead of sleeping. Every step still costs its measured duration, so
  latencies are what a wall run would see, without waiting for nothing.
- MonotonicClock: CLOCK_MONOTONIC (time.monotonic) less an origin the caller gives: one clock
  for every process of the machine, so a measured cluster's instances time their steps on one
  axis (topology/measured.py). Waiting sleeps.
- SimClock: virtual time. A step advances it by the cost model's prediction;
  idle gaps jump. Exact and deterministic: no perf_counter, no sleeping.

After a step's work the engine calls advance(predicted_s): real clocks ignore it
(they measured the work), the simulated clock moves by it.
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

    def advance(self, predicted_s: float | None) -> None:
        pass  # real time already passed


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


class MonotonicClock(WallClock):
    def __init__(self, origin_s: float | None = None):
        """origin_s: a time.monotonic() value (any process's: the clock is system-wide); default now."""
        super().__init__()
        self._origin_s = time.monotonic() if origin_s is None else origin_s

    def start(self) -> None:
        pass  # the origin is shared with the other processes: it moves only by start_at

    def start_at(self, origin_s: float) -> None:
        self._origin_s = origin_s

    def now(self) -> float:
        return time.monotonic() - self._origin_s


class SimClock:
    def __init__(self):
        self._now_s = 0.0

    def start(self) -> None:
        self._now_s = 0.0

    def now(self) -> float:
        return self._now_s

    def wait_until(self, t_s: float) -> None:
        self._now_s = max(self._now_s, t_s)

    def advance(self, predicted_s: float | None) -> None:
        self._now_s += predicted_s


def make_clock(kind: str) -> WallClock:
    return ReplayClock() if kind == "replay" else WallClock()
