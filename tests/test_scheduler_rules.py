"""Deterministic scheduler rules: each test builds one exact state and pins one step's plan.

The property tests (test_scheduler_properties.py) sample random mixes and check invariants; they
stay green when a rule below is broken (tried by hand: the "no admission in a step that preempted"
guard and the budget refund in `_preempt`). These tests pin the rules themselves.

The scheduler is driven only through its public verbs: `Scheduler(cfg, BlockManager(...))`, `add`,
`schedule`, `postprocess(plan, sampled, start_s, end_s)`. Nothing here assigns a field of the
scheduler or of a sequence; the tests read the returned plans and the sequences' public state.
"""
from __future__ import annotations

from chunklab.config import SchedulerConfig
from chunklab.engine.block_manager import BlockManager
from chunklab.engine.scheduler import Scheduler, StepPlan
from chunklab.engine.sequence import Phase, Request, Sequence

BLOCK = 4  # tokens per KV block in every test here


def seq(request_id: int, prompt: int, output: int = 50) -> Sequence:
    return Sequence(Request(request_id, 0.0, (7,) * prompt, output))


def scheduler(num_blocks: int = 64, **cfg) -> Scheduler:
    cfg = {"max_num_seqs": 8, "max_partial_prefills": 2} | cfg
    return Scheduler(SchedulerConfig(**cfg), BlockManager(num_blocks, BLOCK))


def finish_step(sched: Scheduler, plan: StepPlan, t: float) -> None:
    """Runs the step with a fake model: every sequence that samples gets token 1."""
    sampled = {s.seq_id: 1 for s in plan.decodes} | {c.seq.seq_id: 1 for c in plan.prefills if c.is_last}
    sched.postprocess(plan, sampled, t, t + 0.5)


def step(sched: Scheduler, t: float) -> StepPlan:
    plan = sched.schedule()
    finish_step(sched, plan, t)
    return plan


def shape(plan: StepPlan) -> dict:
    """The plan as plain data, for asserts whose failure message shows the whole step."""
    return {"decodes": [s.seq_id for s in plan.decodes],
            "prefills": [(c.seq.seq_id, c.num_tokens, c.is_last) for c in plan.prefills],
            "preempted": [s.seq_id for s in plan.preempted]}


# -- step order ------------------------------------------------------------------------------------

def one_decode_two_partial_prefills(**cfg):
    """A decoding (id 0), B then C partial prefills (ids 1, 2); returns them and the scheduler.

    budget 12, long_prefill_threshold 4, max_partial_prefills 2: every prefill chunk is 4 tokens.
    """
    sched = scheduler(budget=12, long_prefill_threshold=4, **cfg)
    a, b, c = seq(0, 3), seq(1, 40), seq(2, 40)
    sched.add(a)
    assert shape(step(sched, 0)) == {"decodes": [], "prefills": [(0, 3, True)], "preempted": []}
    sched.add(b)
    assert shape(step(sched, 1))["prefills"] == [(1, 4, False)]
    sched.add(c)
    assert shape(step(sched, 2))["prefills"] == [(1, 4, False), (2, 4, False)]
    assert (a.phase, b.phase, c.phase) == (Phase.DECODING, Phase.PREFILLING, Phase.PREFILLING)
    return sched, a, b, c


def test_step_order_decode_then_older_prefill_then_newer_then_admission():
    sched, a, b, c = one_decode_two_partial_prefills()
    d = seq(3, 3)  # fits in one chunk, so it does not count against max_partial_prefills
    sched.add(d)
    plan = sched.schedule()
    assert plan.decodes == [a], shape(plan)
    assert [ch.seq for ch in plan.prefills] == [b, c, d], (
        f"expected the older prefill (1), the newer (2), then the admission (3): {shape(plan)}")
    assert [(ch.num_tokens, ch.is_last) for ch in plan.prefills] == [(4, False), (4, False), (3, True)], shape(plan)
    assert plan.num_decode_tokens == 1 and plan.num_prefill_tokens == 11
    assert plan.num_tokens == 12  # the whole budget (12), and not a token more
    assert not plan.preempted
    assert d.phase is Phase.PREFILLING  # admitted


def test_no_third_partial_prefill_is_admitted():
    """The same state with a long waiting prompt: it would be a third partial prefill, so it waits."""
    sched, a, b, c = one_decode_two_partial_prefills()
    d = seq(3, 40)
    sched.add(d)
    plan = sched.schedule()
    assert shape(plan) == {"decodes": [0], "prefills": [(1, 4, False), (2, 4, False)], "preempted": []}
    assert d.phase is Phase.WAITING


def test_decode_first_gives_the_decode_its_token_before_a_prefill():
    """Budget 8, one decode and a long prefill: decode_first decodes and the chunk takes the other 7."""
    sched = scheduler(budget=8)
    a, b = seq(0, 3), seq(1, 40)
    sched.add(a)
    step(sched, 0)
    sched.add(b)
    assert shape(step(sched, 1)) == {"decodes": [0], "prefills": [(1, 7, False)], "preempted": []}
    assert shape(sched.schedule()) == {"decodes": [0], "prefills": [(1, 7, False)], "preempted": []}


def test_prefill_first_gives_decodes_what_prefills_leave():
    """The same requests under prefill_first: the prefill takes the whole budget, the decode waits;
    when the prefill's last chunk leaves budget, the decode runs in the same step."""
    sched = scheduler(budget=8, ordering="prefill_first")
    a, b = seq(0, 3), seq(1, 19)
    sched.add(a)
    step(sched, 0)
    sched.add(b)
    assert shape(step(sched, 1)) == {"decodes": [], "prefills": [(1, 8, False)], "preempted": []}
    assert shape(step(sched, 2)) == {"decodes": [], "prefills": [(1, 8, False)], "preempted": []}
    # 3 tokens of b's prompt are left: its last chunk, then a's decode with the budget left
    assert shape(step(sched, 3)) == {"decodes": [0], "prefills": [(1, 3, True)], "preempted": []}


def test_prefill_first_order_running_prefill_then_admission_then_decodes():
    """prefill_first: the running prefill's chunk, then the admission, then decodes with what is left."""
    sched = scheduler(budget=10, ordering="prefill_first", long_prefill_threshold=4)
    a, b = seq(0, 3), seq(1, 40)
    sched.add(a)
    step(sched, 0)
    sched.add(b)
    assert shape(step(sched, 1)) == {"decodes": [0], "prefills": [(1, 4, False)], "preempted": []}
    d = seq(2, 5)
    sched.add(d)
    plan = sched.schedule()
    # b 4 + d 4 (its first chunk: the threshold) = 8, then a's decode: 9 of 10
    assert shape(plan) == {"decodes": [0], "prefills": [(1, 4, False), (2, 4, False)], "preempted": []}
    small = scheduler(budget=8, ordering="prefill_first", long_prefill_threshold=4)
    a, b, d = seq(0, 3), seq(1, 40), seq(2, 5)
    small.add(a)
    step(small, 0)
    small.add(b)
    step(small, 1)
    small.add(d)
    # budget 8: the prefills take all of it and the decode is skipped
    assert shape(small.schedule()) == {"decodes": [], "prefills": [(1, 4, False), (2, 4, False)], "preempted": []}


# -- admission -------------------------------------------------------------------------------------

def test_fcfs_admits_in_arrival_order():
    sched = scheduler(budget=64, admission="fcfs")
    for i, prompt in enumerate((9, 2, 5)):
        sched.add(seq(i, prompt))
    assert shape(sched.schedule())["prefills"] == [(0, 9, True), (1, 2, True), (2, 5, True)]


def test_shortest_prompt_first_admits_shortest_waiting_prompt_first():
    sched = scheduler(budget=64, admission="shortest_prompt_first")
    for i, prompt in enumerate((9, 2, 5)):
        sched.add(seq(i, prompt))
    assert shape(sched.schedule())["prefills"] == [(1, 2, True), (2, 5, True), (0, 9, True)]


def test_shortest_prompt_first_picks_the_shortest_when_only_one_fits():
    sched = scheduler(budget=64, admission="shortest_prompt_first", max_num_seqs=1)
    for i, prompt in enumerate((9, 5, 2, 7)):
        sched.add(seq(i, prompt, output=2))
    plan = step(sched, 0)
    assert shape(plan)["prefills"] == [(2, 2, True)]
    assert shape(step(sched, 1)) == {"decodes": [2], "prefills": [], "preempted": []}  # 2 finishes
    # the slot is free: the next admission is again the shortest of those still waiting
    assert shape(sched.schedule())["prefills"] == [(1, 5, True)]


# -- preemption ------------------------------------------------------------------------------------

def test_no_admission_in_a_step_that_preempted():
    """A 4-block pool, budget 8, decode_first. A (prompt 4) decodes and holds two blocks; V
    (prompt 8) is admitted and takes the other two. When V's decode needs a third block, the pool
    is full and V, the newest, is preempted. Its two blocks are free again and 7 tokens of budget
    are left, so only the guard keeps V from being admitted again in that same step (it would
    thrash); it is admitted in the next one."""
    sched = scheduler(num_blocks=4, budget=8)
    a, v = seq(0, 4), seq(1, 8)
    sched.add(a)
    step(sched, 0)
    sched.add(v)
    assert shape(step(sched, 1)) == {"decodes": [0], "prefills": [(1, 7, False)], "preempted": []}
    assert shape(step(sched, 2)) == {"decodes": [0], "prefills": [(1, 1, True)], "preempted": []}
    assert v.phase is Phase.DECODING and v.num_computed_tokens == 8  # its two blocks are full
    plan = sched.schedule()
    assert plan.preempted == [v], shape(plan)
    assert plan.prefills == [], f"admitted in a step that preempted: {shape(plan)}"
    assert plan.decodes == [a] and plan.num_tokens == 1
    assert v.phase is Phase.WAITING and v.num_preemptions == 1
    finish_step(sched, plan, 3)
    # the next step: no preemption, so V is admitted again and recomputes 7 of its 9 tokens
    assert shape(sched.schedule()) == {"decodes": [0], "prefills": [(1, 7, False)], "preempted": []}


def test_preempted_chunk_refunds_its_budget_and_the_decodes_after_it_spend_it():
    """prefill_first, budget 4, a 6-block pool. A (prompt 4, its block full) and B, C, D, E (prompt 1
    each) decode; each holds one block. V (prompt 3) is admitted with a 3-token chunk and takes the
    last block; 1 token of budget is left. A's decode then needs a block: V, the newest, is
    preempted and its 3 tokens go back to the budget. A decodes, then B, C and D on the refunded
    budget, which is then spent to the token: E waits.

    Without the refund only A decodes (1 of 4 tokens); with too large a refund E decodes too (5 of 4).

    Why prefill_first: under decode_first a refund can only go to the admissions after it, which
    the guard above blocks; only a prefill_first step spends one (decodes after a preempted chunk).
    The +1 refunded for a preempted decode is never observable while the guard holds (a random
    search of 30,000 scheduler runs found no plan it changes), so no test here pins it."""
    sched = scheduler(num_blocks=6, budget=4, ordering="prefill_first")
    a, v = seq(0, 4), seq(5, 3)
    others = [seq(i, 1) for i in range(1, 5)]
    sched.add(a)
    assert shape(step(sched, 0)) == {"decodes": [], "prefills": [(0, 4, True)], "preempted": []}
    for s in others:
        sched.add(s)
    assert shape(step(sched, 1)) == {"decodes": [], "prefills": [(i, 1, True) for i in range(1, 5)], "preempted": []}
    assert all(s.phase is Phase.DECODING for s in [a, *others])
    sched.add(v)
    plan = sched.schedule()
    assert plan.preempted == [v] and plan.prefills == [], shape(plan)
    assert plan.decodes == [a, *others[:3]], f"the preempted chunk's 3 tokens were not spent on decodes: {shape(plan)}"
    assert plan.num_tokens == 4, shape(plan)  # the whole budget
    assert v.phase is Phase.WAITING and v.num_computed_tokens == 0 and v.num_preemptions == 1
