"""Token-budget scheduler with chunked prefill. Plain Python, no torch.

Each step spends `budget` tokens. `decode_first` (the chapter's policy) gives
every decoding sequence its token, then continues in-flight prefills oldest
first, then admits new requests. `prefill_first` runs prefills first and gives
decodes what is left.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from chunklab.config import SchedulerConfig
from chunklab.engine.block_manager import BlockManager
from chunklab.engine.sequence import Phase, Sequence


@dataclass
class ScheduledChunk:
    seq: Sequence
    num_tokens: int
    # True when this chunk completes the prefill, so the step samples a token for it.
    is_last: bool


@dataclass
class StepPlan:
    decodes: list[Sequence] = field(default_factory=list)
    prefills: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_decode_tokens(self) -> int:
        return len(self.decodes)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.prefills)

    @property
    def num_tokens(self) -> int:
        return self.num_decode_tokens + self.num_prefill_tokens

    @property
    def is_empty(self) -> bool:
        return not self.decodes and not self.prefills


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, block_manager: BlockManager):
        self.cfg = cfg
        self.block_manager = block_manager
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: oldest first
        self.num_preemptions = 0
        self.num_chunked_prefills = 0  # chunks that left their prefill unfinished

    # -- queue -----------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- planning --------------------------------------------------------
    def schedule(self) -> StepPlan:
        plan = StepPlan()
        self._budget_left = self.cfg.budget
        if self.cfg.ordering == "decode_first":
            self._schedule_decodes(plan)
            self._schedule_running_prefills(plan)
            self._schedule_admissions(plan)
        else:  # prefill_first
            self._schedule_running_prefills(plan)
            self._schedule_admissions(plan)
            self._schedule_decodes(plan)
        return plan

    def _schedule_decodes(self, plan: StepPlan) -> None:
        for seq in list(self.running):
            if self._budget_left < 1:
                return
            if seq.phase is not Phase.DECODING or seq not in self.running:
                continue
            if self._make_room(seq, 1, plan) == 1:
                plan.decodes.append(seq)
                self._budget_left -= 1

    def _schedule_running_prefills(self, plan: StepPlan) -> None:
        for seq in list(self.running):
            if self._budget_left < 1:
                return
            if seq.phase is not Phase.PREFILLING or seq not in self.running:
                continue
            num_tokens = self._make_room(seq, self._chunk_size(seq), plan)
            if num_tokens > 0:
                self._add_chunk(plan, seq, num_tokens)

    def _schedule_admissions(self, plan: StepPlan) -> None:
        if plan.preempted:  # memory is short: admitting now would thrash
            return
        while self.waiting and self._budget_left >= 1 and len(self.running) < self.cfg.max_num_seqs:
            seq = self._next_waiting()
            num_tokens = self._chunk_size(seq)
            leaves_partial = num_tokens < seq.num_prefill_remaining
            if leaves_partial and self._num_partial_after(plan) >= self.cfg.max_partial_prefills:
                return
            if not self.block_manager.can_allocate(seq, num_tokens):
                return
            self.waiting.remove(seq)
            seq.start_prefill()
            self.running.append(seq)
            self.block_manager.allocate(seq, num_tokens)
            self._add_chunk(plan, seq, num_tokens)

    def _next_waiting(self) -> Sequence:
        if self.cfg.admission == "shortest_prompt_first":
            return min(self.waiting, key=lambda s: s.num_prefill_remaining)
        return self.waiting[0]

    def _chunk_size(self, seq: Sequence) -> int:
        size = min(seq.num_prefill_remaining, self._budget_left)
        if self.cfg.long_prefill_threshold > 0:
            size = min(size, self.cfg.long_prefill_threshold)
        return size

    def _num_partial_after(self, plan: StepPlan) -> int:
        """Prefills that will still be unfinished after this step's chunks."""
        scheduled = {id(c.seq): c.num_tokens for c in plan.prefills}
        return sum(
            1 for s in self.running
            if s.phase is Phase.PREFILLING and scheduled.get(id(s), 0) < s.num_prefill_remaining
        )

    def _add_chunk(self, plan: StepPlan, seq: Sequence, num_tokens: int) -> None:
        is_last = num_tokens == seq.num_prefill_remaining
        plan.prefills.append(ScheduledChunk(seq, num_tokens, is_last))
        self._budget_left -= num_tokens
        if not is_last:
            self.num_chunked_prefills += 1

    # -- memory ----------------------------------------------------------
    def _make_room(self, seq: Sequence, want_tokens: int, plan: StepPlan) -> int:
        """Allocate blocks for up to want_tokens of a running seq; returns how many fit.

        A prefill shrinks its chunk to what fits. When nothing fits, the newest
        running sequence is preempted (possibly seq itself, which then gets 0).
        """
        bm = self.block_manager
        if bm.fits_own_blocks(seq, want_tokens):  # nothing to allocate: most decodes, every step
            return want_tokens
        while True:
            num_tokens = min(want_tokens, bm.max_fitting_tokens(seq))
            if num_tokens > 0:
                bm.allocate(seq, num_tokens)
                return num_tokens
            victim = self.running[-1]
            self._preempt(victim, plan)
            if victim is seq:
                return 0

    def _preempt(self, victim: Sequence, plan: StepPlan) -> None:
        if victim in plan.decodes:
            plan.decodes.remove(victim)
            self._budget_left += 1
        for chunk in [c for c in plan.prefills if c.seq is victim]:
            plan.prefills.remove(chunk)
            self._budget_left += chunk.num_tokens
        self.block_manager.free(victim)
        victim.preempt()
        self.running.remove(victim)
        self.waiting.appendleft(victim)
        plan.preempted.append(victim)
        self.num_preemptions += 1

    # -- after the forward -----------------------------------------------
    def postprocess(self, plan: StepPlan, sampled: dict[int, int], start_s: float, end_s: float) -> list[Sequence]:
        """Apply a finished step; returns the sequences that finished in it."""
        for chunk in plan.prefills:
            seq = chunk.seq
            if seq.first_scheduled_s is None:
                seq.first_scheduled_s = start_s
            seq.num_computed_tokens += chunk.num_tokens
            if chunk.is_last:
                seq.append_token(sampled[seq.seq_id], end_s)
        for seq in plan.decodes:
            seq.num_computed_tokens += 1
            seq.append_token(sampled[seq.seq_id], end_s)
        finished = [s for s in self.running if s.phase is Phase.FINISHED]
        for seq in finished:
            self.block_manager.free(seq)
            self.running.remove(seq)
        return finished
