"""Token-budget scheduler with chunked prefill. Plain Python, no torch.

Each step spends a token budget over three parts (policies/base.py): decodes, the running
prefills' next chunks, admissions. The budget policy sets each step's budget (`fixed`, the
chapter's: scheduler.budget every step; adaptive ones from the queues or from predicted step
times, through a StepTimePredictor given at construction). The ordering policy says which part spends first
(`decode_first`, the chapter's: decodes, then in-flight prefills oldest first, then
admissions); the admission policy says which waiting sequence goes next.

The scheduler owns its queues and counters. Other modules use its verbs: add, schedule,
postprocess; stats for counters; stage and release_all to set up a chosen step (calibration);
hand_off, release_sent and admit_prefilled to move a prefilled sequence between instances
(prefill/decode disaggregation, chunklab/topology/).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from chunklab.config import SchedulerConfig
from chunklab.engine.block_manager import BlockManager
from chunklab.engine.policies import Part, StepTimePredictor, admission_policy, budget_policy, ordering_policy
from chunklab.engine.sequence import Phase, Request, Sequence


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


@dataclass(frozen=True)
class SchedulerStats:
    num_preemptions: int
    num_chunked_prefills: int  # chunks that left their prefill unfinished
    num_running: int
    num_waiting: int

    def __reduce__(self):  # pickled by its fields, as Request (sequence.py)
        return SchedulerStats, (self.num_preemptions, self.num_chunked_prefills, self.num_running, self.num_waiting)


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, block_manager: BlockManager, step_time: StepTimePredictor | None = None):
        """step_time: the run's cost model as a predictor, for budget policies that need one (else None)."""
        self.block_manager = block_manager
        self._step_time = step_time
        self.reconfigure(cfg)
        self._waiting: deque[Sequence] = deque()
        self._running: list[Sequence] = []  # admission order: oldest first
        self._num_preemptions = 0
        self._num_chunked_prefills = 0
        self._sending: dict[int, list[int]] = {}  # seq_id -> KV blocks handed off, held until sent
        self._fill = {Part.DECODES: self._schedule_decodes, Part.PREFILLS: self._schedule_running_prefills,
                      Part.ADMISSIONS: self._schedule_admissions}

    def reconfigure(self, cfg: SchedulerConfig) -> None:
        """Budget, limits and policies for the steps to come (the queues are kept)."""
        self._cfg = cfg
        self._parts = ordering_policy(cfg.ordering).parts
        self._admission = admission_policy(cfg.admission)
        self._budget_policy = budget_policy(cfg, self._step_time)

    @property
    def config(self) -> SchedulerConfig:
        return self._cfg

    # -- queue -----------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        self._waiting.append(seq)

    @property
    def num_unfinished(self) -> int:
        return len(self._waiting) + len(self._running)

    @property
    def running(self) -> tuple[Sequence, ...]:
        """The running sequences, oldest admitted first (a snapshot: change them through the verbs)."""
        return tuple(self._running)

    @property
    def waiting(self) -> tuple[Sequence, ...]:
        """The waiting queue, next in line first under fcfs (a snapshot)."""
        return tuple(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    def stats(self) -> SchedulerStats:
        return SchedulerStats(self._num_preemptions, self._num_chunked_prefills, len(self._running),
                              len(self._waiting))

    def reset_stats(self) -> None:
        """Counters back to 0 (after a warm-up, so a run counts only its own steps)."""
        self._num_preemptions = self._num_chunked_prefills = 0

    # -- staging (calibration) ------------------------------------------
    def stage(self, request: Request, num_cached: int, decoding: bool = False,
              token_id: int = 0) -> Sequence:
        """Puts a sequence straight into the running set with num_cached tokens already cached
        (their blocks allocated now), as if earlier steps had computed them: prefilling the rest of
        its prompt, or (decoding) with the prompt cached and token_id sampled, decoding next. How a
        probe makes the next schedule() plan a chosen step shape; KV contents are whatever the
        pool holds (step time depends on shapes, not values)."""
        seq = Sequence(request)
        if not self.block_manager.can_allocate(seq, num_cached):
            raise ValueError(f"stage: {num_cached} cached tokens need more KV blocks than the pool has free "
                             f"({self.block_manager.num_free_blocks})")
        self.block_manager.allocate(seq, num_cached)
        seq.start_prefill()
        seq.mark_computed(num_cached)
        if decoding:
            seq.append_token(token_id, 0.0)
        self._running.append(seq)
        return seq

    def release_all(self) -> None:
        """Frees every running sequence's blocks and forgets them (nothing may be waiting)."""
        assert not self._waiting, "release_all with sequences waiting"
        for seq in self._running:
            self.block_manager.free(seq)
        self._running.clear()

    # -- disaggregation: a prefilled sequence moves to another instance ---
    def prefilled(self) -> list[Sequence]:
        """Running sequences whose prefill is done (decoding next), oldest admitted first: on a
        prefill instance, the ones to hand off after a step."""
        return [s for s in self._running if s.phase is Phase.DECODING]

    def hand_off(self, seq: Sequence) -> None:
        """Takes a prefilled sequence out of the running set for another instance to decode. Its KV
        blocks stay allocated here, being sent, until release_sent(seq)."""
        assert seq.phase is Phase.DECODING, f"hand_off of a {seq.phase.name} sequence"
        self._running.remove(seq)
        self._sending[seq.seq_id] = seq.block_table
        seq.block_table = []

    def release_sent(self, seq: Sequence) -> None:
        """The handed-off sequence's KV has arrived at its decode instance: its blocks here are free."""
        self.block_manager.free_ids(self._sending.pop(seq.seq_id))

    @property
    def num_sending_blocks(self) -> int:
        return sum(map(len, self._sending.values()))

    def reserve_incoming(self, seq: Sequence) -> bool:
        """Blocks here for a sequence prefilled elsewhere, before its KV is sent: the KV lands in them
        (a simulated decode instance reserves them when the transfer starts). False (nothing changed)
        while they do not fit."""
        assert seq.phase is Phase.DECODING and not seq.block_table, "reserve_incoming: not a handed-off sequence"
        if not self.block_manager.can_allocate(seq, 0):
            return False
        self.block_manager.allocate(seq, 0)
        return True

    def admit_prefilled(self, seq: Sequence) -> bool:
        """Admits a sequence prefilled elsewhere whose KV has arrived: it joins the running set
        decoding, in the blocks reserve_incoming gave it, or in blocks allocated here now for its
        cached tokens. False (nothing changed) while the running set is full or the blocks do not fit."""
        assert seq.phase is Phase.DECODING, "admit_prefilled: not a handed-off sequence"
        if len(self._running) >= self._cfg.max_num_seqs:
            return False
        if not seq.block_table:
            if not self.block_manager.can_allocate(seq, 0):
                return False
            self.block_manager.allocate(seq, 0)
        self._running.append(seq)
        return True

    # -- planning --------------------------------------------------------
    def schedule(self) -> StepPlan:
        plan = StepPlan()
        self._budget_left = self._budget_policy.step_budget(self._running, self._waiting)
        for part in self._parts:
            self._fill[part](plan)
        return plan

    def _running_in(self, phase: Phase):
        """Running sequences in `phase`, oldest first, while budget is left. Iterates a snapshot; a
        sequence that a preemption (by _make_room) has since taken out of the running set is WAITING,
        so the phase test skips it."""
        for seq in list(self._running):
            if self._budget_left < 1:
                return
            if seq.phase is phase:
                yield seq

    def _schedule_decodes(self, plan: StepPlan) -> None:
        for seq in self._running_in(Phase.DECODING):
            if self._make_room(seq, 1, plan) == 1:
                plan.decodes.append(seq)
                self._budget_left -= 1

    def _schedule_running_prefills(self, plan: StepPlan) -> None:
        for seq in self._running_in(Phase.PREFILLING):
            num_tokens = self._make_room(seq, self._chunk_size(seq), plan)
            if num_tokens > 0:
                self._add_chunk(plan, seq, num_tokens)

    def _schedule_admissions(self, plan: StepPlan) -> None:
        if plan.preempted:  # memory is short: admitting now would thrash
            return
        while self._waiting and self._budget_left >= 1 and len(self._running) < self._cfg.max_num_seqs:
            seq = self._admission.pick(self._waiting)
            num_tokens = self._chunk_size(seq)
            leaves_partial = num_tokens < seq.num_prefill_remaining
            if leaves_partial and self._num_partial_after(plan) >= self._cfg.max_partial_prefills:
                return
            if not self.block_manager.can_allocate(seq, num_tokens):
                return
            self._waiting.remove(seq)
            seq.start_prefill()
            self._running.append(seq)
            self.block_manager.allocate(seq, num_tokens)
            self._add_chunk(plan, seq, num_tokens)

    def _chunk_size(self, seq: Sequence) -> int:
        size = min(seq.num_prefill_remaining, self._budget_left)
        if self._cfg.long_prefill_threshold > 0:
            size = min(size, self._cfg.long_prefill_threshold)
        return size

    def _num_partial_after(self, plan: StepPlan) -> int:
        """Prefills that will still be unfinished after this step's chunks."""
        scheduled = {id(c.seq): c.num_tokens for c in plan.prefills}
        return sum(
            1 for s in self._running
            if s.phase is Phase.PREFILLING and scheduled.get(id(s), 0) < s.num_prefill_remaining
        )

    def _add_chunk(self, plan: StepPlan, seq: Sequence, num_tokens: int) -> None:
        is_last = num_tokens == seq.num_prefill_remaining
        plan.prefills.append(ScheduledChunk(seq, num_tokens, is_last))
        self._budget_left -= num_tokens
        if not is_last:
            self._num_chunked_prefills += 1

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
            victim = self._running[-1]
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
        self._running.remove(victim)
        self._waiting.appendleft(victim)
        plan.preempted.append(victim)
        self._num_preemptions += 1

    # -- after the forward -----------------------------------------------
    def observe_step(self, measured_s: float, predicted_s: float) -> None:
        """A finished step's seconds and the cost model's prediction of them, for the budget policy."""
        self._budget_policy.observe_step(measured_s, predicted_s)

    def postprocess(self, plan: StepPlan, sampled: dict[int, int], start_s: float, end_s: float) -> list[Sequence]:
        """Apply a finished step; returns the sequences that finished in it."""
        for chunk in plan.prefills:
            seq = chunk.seq
            seq.mark_scheduled(start_s)
            seq.mark_computed(chunk.num_tokens)
            if chunk.is_last:
                seq.append_token(sampled[seq.seq_id], end_s)
        for seq in plan.decodes:
            seq.mark_computed(1)
            seq.append_token(sampled[seq.seq_id], end_s)
        finished = [s for s in self._running if s.phase is Phase.FINISHED]
        for seq in finished:
            self.block_manager.free(seq)
            self._running.remove(seq)
        return finished
