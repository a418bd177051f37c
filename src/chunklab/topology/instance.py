"""One instance of a cluster: an engine (its own scheduler, block manager and executor) in a role,
and the load it reports to the routers. The routers read it through these methods only."""
from __future__ import annotations

from collections import deque

from chunklab.engine.engine import LLMEngine, StepRecord
from chunklab.engine.sequence import Request, Sequence
from chunklab.engine.step_log import StepLog

ROLES = ("replica", "prefill", "decode")


class Instance:
    def __init__(self, index: int, role: str, engine: LLMEngine, name: str):
        """index: its place among the cluster's instances (steps.csv's `instance`); name: `<role><n>`,
        n counted within the role (requests.csv, metrics)."""
        assert role in ROLES, role
        self.index, self.role, self.engine, self.name = index, role, engine, name
        self.steps = StepLog(with_features=engine.log_features)
        self.num_routed = 0  # requests the router sent here (decode: handed-off sequences)
        self._arrived: deque[Sequence] = deque()  # KV here, waiting for the scheduler to admit them
        self._incoming: list[Sequence] = []  # KV on its way here

    # -- load, as the routers read it -----------------------------------------------------------
    def outstanding_requests(self) -> int:
        """Requests here and unfinished: queued, running, arrived or on their way."""
        return self.engine.scheduler.num_unfinished + len(self._arrived) + len(self._incoming)

    def outstanding_tokens(self) -> int:
        """Prefill tokens still to compute plus KV tokens in use (NVIDIA Dynamo's worker cost), counting
        the KV of sequences arrived or on their way as in use."""
        sched, bm = self.engine.scheduler, self.engine.block_manager
        to_prefill = sum(s.num_prefill_remaining for s in sched.waiting)
        to_prefill += sum(s.num_prefill_remaining for s in sched.running)
        in_use = bm.num_used_blocks * bm.block_size  # with the blocks reserved for KV on its way (reserve)
        moving = sum(s.num_computed_tokens for s in (*self._arrived, *self._incoming) if not s.block_table)
        return to_prefill + in_use + moving

    # -- requests in --------------------------------------------------------------------------------
    def rejection_reason(self, request: Request) -> str:
        return self.engine.rejection_reason(request)

    def add(self, request: Request) -> Sequence:
        self.num_routed += 1
        return self.engine.add_request(request)

    def expect(self, seq: Sequence) -> None:
        """A prefilled sequence's KV is on its way here."""
        self.num_routed += 1
        self._incoming.append(seq)

    def reserve(self, seq: Sequence) -> bool:
        """Blocks here for a sequence expected here, before its KV is sent; False while they do not fit,
        and while sequences preempted here wait to be recomputed (they go first: else the KV arriving
        could keep taking the blocks they need)."""
        return not self.engine.scheduler.num_waiting and self.engine.scheduler.reserve_incoming(seq)

    def receive(self, seq: Sequence) -> None:
        """Its KV has arrived: admitted at this instance's next step start, in arrival order."""
        self._incoming.remove(seq)
        self._arrived.append(seq)

    # -- stepping -----------------------------------------------------------------------------------
    @property
    def has_work(self) -> bool:
        return self.engine.has_unfinished or bool(self._arrived)

    def admit_arrived(self) -> list[Sequence]:
        """Admits arrived sequences while the scheduler takes them (oldest first); returns them."""
        admitted = []
        while self._arrived and self.engine.scheduler.admit_prefilled(self._arrived[0]):
            admitted.append(self._arrived.popleft())
        return admitted

    def step(self, now: float) -> tuple[StepRecord, list[Sequence]]:
        """One engine step starting at `now` (>= the end of its last): its record and the sequences
        that finished in it. The engine's clock ends at the step's end."""
        self.engine.clock.wait_until(now)
        record, finished = self.engine.step()
        self.steps.append(record)
        return record, finished

    def step_logged(self, now: float) -> list[Sequence] | None:
        """step(now) for a caller that needs no record (the simulator): the step is logged all the same.
        None (no step) while the blocks a step needs are held by transfers in flight: out with KV being
        sent from here, or reserved for KV on its way here (reserve); it can step again once such a
        transfer ends. Planning nothing otherwise is the scheduler's fault, and raises."""
        self.engine.clock.wait_until(now)
        out = self.engine.try_step_values()
        if out is None:
            if self.engine.scheduler.num_sending_blocks or any(s.block_table for s in self._incoming):
                return None
            raise RuntimeError("scheduler made no progress with unfinished requests")
        values, features, finished = out
        self.steps.append_values(values, features)
        return finished

    def hand_off(self) -> list[Sequence]:
        """A prefill instance's sequences whose first token the last step sampled, out of its running
        set (their blocks held until sent)."""
        out = self.engine.scheduler.prefilled()
        for seq in out:
            self.engine.scheduler.hand_off(seq)
        return out

    def release_sent(self, seq: Sequence) -> None:
        self.engine.scheduler.release_sent(seq)

    def now(self) -> float:
        return self.engine.clock.now()
