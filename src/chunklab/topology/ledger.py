"""Who holds each request of a measured cluster, as the coordinator learns it (topology/measured.py).

Every offered request is in exactly one state at any time: pending (not arrived yet), held by one
instance, or done (finished, rejected, or lost with a dead instance). Every move is checked: a
request cannot be finished twice, by an instance that does not hold it, or after it was lost; so the
end of a run accounts for each offered request once. Plain Python.
"""
from __future__ import annotations

from collections import Counter

PENDING, FINISHED, REJECTED, LOST = "pending", "finished", "rejected", "lost"


class LedgerError(AssertionError):
    """A move the cluster's protocol never makes (a bug, not bad input)."""


class Ledger:
    def __init__(self, request_ids):
        self._state: dict[int, str] = {}  # request_id -> PENDING | FINISHED | REJECTED | LOST | "@<instance>"
        for rid in request_ids:
            if rid in self._state:
                raise LedgerError(f"request {rid} offered twice")
            self._state[rid] = PENDING
        self._num_open = len(self._state)  # pending or held: each move to a done state takes one off

    def _expect(self, rid: int, state: str, verb: str) -> None:
        if self._state.get(rid) != state:
            raise LedgerError(f"{verb} request {rid}: it is {self._state.get(rid, 'not offered')}, not {state}")

    def assign(self, rid: int, instance: str) -> None:
        """An arrival routed to `instance`."""
        self._expect(rid, PENDING, "assign")
        self._state[rid] = "@" + instance

    def reject(self, rid: int) -> None:
        self._expect(rid, PENDING, "reject")
        self._state[rid] = REJECTED
        self._num_open -= 1

    def move(self, rid: int, source: str, target: str) -> None:
        """A prefilled request handed from `source` to `target` (its KV on the way)."""
        self._expect(rid, "@" + source, "move")
        self._state[rid] = "@" + target

    def finish(self, rid: int, instance: str) -> None:
        self._expect(rid, "@" + instance, "finish")
        self._state[rid] = FINISHED
        self._num_open -= 1

    def lose(self, instance: str) -> list[int]:
        """`instance` died: the requests it held are lost (reported unfinished); returns them."""
        held = self.held_by(instance)
        for rid in held:
            self._state[rid] = LOST
        self._num_open -= len(held)
        return held

    def held_by(self, instance: str) -> list[int]:
        return [rid for rid, state in self._state.items() if state == "@" + instance]

    def holder(self, rid: int) -> str:
        """The instance holding it ("" when none does)."""
        state = self._state[rid]
        return state[1:] if state.startswith("@") else ""

    @property
    def num_open(self) -> int:
        """Requests not done: pending or held (a count kept by the moves: the coordinator reads it on
        every pass of its loop)."""
        return self._num_open

    def counts(self) -> Counter:
        """finished / rejected / lost / pending / held: how many requests are in each."""
        return Counter("held" if s.startswith("@") else s for s in self._state.values())
