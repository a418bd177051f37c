"""Property tests of the scheduler and block manager alone (no model, no torch)."""
from hypothesis import given, settings
from hypothesis import strategies as st

from chunklab.config import SchedulerConfig
from chunklab.engine.block_manager import BlockManager
from chunklab.engine.scheduler import Scheduler
from chunklab.engine.sequence import Phase, Request, Sequence

request_mix = st.lists(
    st.tuples(st.integers(1, 300), st.integers(1, 12), st.integers(0, 30)),  # prompt, output, arrival step
    min_size=1, max_size=25,
)
configs = st.builds(
    lambda max_seqs, extra, ordering, admission, partial, threshold: SchedulerConfig(
        budget=max_seqs + extra, ordering=ordering, admission=admission, max_num_seqs=max_seqs,
        max_partial_prefills=partial, long_prefill_threshold=threshold),
    st.integers(1, 8), st.integers(0, 600), st.sampled_from(["decode_first", "prefill_first"]),
    st.sampled_from(["fcfs", "shortest_prompt_first"]), st.integers(1, 4), st.sampled_from([0, 16, 100]),
)


def drive(cfg: SchedulerConfig, mix, num_blocks: int, block_size: int = 8):
    """Runs the scheduler to completion with a fake model; checks invariants every step."""
    bm = BlockManager(num_blocks, block_size)
    sched = Scheduler(cfg, bm)
    capacity = num_blocks * block_size
    seqs = [Sequence(Request(i, float(at), (7,) * p, o)) for i, (p, o, at) in enumerate(mix)
            if p + o - 1 <= capacity]  # the engine rejects the rest before the scheduler
    step = 0
    while any(not s.is_done for s in seqs):
        for s in seqs:
            if s.request.arrival_s == step:
                sched.add(s)
        decoding_before = [s for s in sched.running if s.phase is Phase.DECODING]
        plan = sched.schedule()
        check_plan(cfg, sched, plan, decoding_before)
        sampled = {s.seq_id: 1 for s in plan.decodes} | {c.seq.seq_id: 1 for c in plan.prefills if c.is_last}
        sched.postprocess(plan, sampled, step, step + 0.5)
        assert bm.num_free_blocks + sum(len(s.block_table) for s in sched.running) == num_blocks
        assert bm.num_free_blocks + bm.num_used_blocks == num_blocks
        step += 1
        assert step < 10_000, "starvation: requests never finish"
    assert bm.num_free_blocks == num_blocks
    assert all(s.phase is Phase.FINISHED and s.num_output_tokens == s.request.max_output_tokens for s in seqs)
    return sched


def check_plan(cfg, sched, plan, decoding_before):
    assert plan.num_tokens <= cfg.budget
    assert len(sched.running) <= cfg.max_num_seqs
    for chunk in plan.prefills:  # a finished or decoding sequence never takes the prefill path
        assert chunk.seq.phase is Phase.PREFILLING
        assert 0 < chunk.num_tokens <= chunk.seq.num_prefill_remaining
        if cfg.long_prefill_threshold:
            assert chunk.num_tokens <= cfg.long_prefill_threshold
    assert all(s.phase is Phase.DECODING for s in plan.decodes)
    # every scheduled sequence holds exactly the blocks its cached tokens plus this step's need
    bm = sched.block_manager
    for seq, num_tokens in [(s, 1) for s in plan.decodes] + [(c.seq, c.num_tokens) for c in plan.prefills]:
        assert len(seq.block_table) == bm.blocks_for_tokens(seq.num_computed_tokens + num_tokens)
    if not sched.waiting and not plan.preempted:
        assert plan.num_tokens > 0 or not sched.running
    if cfg.ordering == "decode_first":
        # every sequence that was decoding decodes, unless memory forced it out
        skipped = [s for s in decoding_before if s not in plan.decodes and s not in plan.preempted]
        assert not skipped
    elif plan.prefills:
        # prefill_first: a decode is skipped only if prefills left no budget for it
        skipped = [s for s in decoding_before if s not in plan.decodes and s not in plan.preempted]
        assert not skipped or plan.num_tokens == cfg.budget
    partial = [s for s in sched.running if s.phase is Phase.PREFILLING]
    unfinished_after = [s for s in partial if sum(c.num_tokens for c in plan.prefills if c.seq is s) < s.num_prefill_remaining]
    assert len(unfinished_after) <= max(cfg.max_partial_prefills, 0) or plan.preempted


@settings(max_examples=150, deadline=None)
@given(cfg=configs, mix=request_mix)
def test_invariants_with_ample_memory(cfg, mix):
    drive(cfg, mix, num_blocks=512)


@settings(max_examples=150, deadline=None)
@given(cfg=configs, mix=request_mix, num_blocks=st.integers(40, 80))
def test_invariants_under_memory_pressure(cfg, mix, num_blocks):
    drive(cfg, mix, num_blocks=num_blocks)


def test_fcfs_admits_in_arrival_order():
    cfg = SchedulerConfig(budget=8, max_num_seqs=8)
    sched = drive(cfg, [(30, 2, 0), (5, 2, 0), (5, 2, 0)], num_blocks=64)
    assert sched.stats().num_chunked_prefills > 0


def test_shortest_prompt_first_admits_short_before_long():
    bm = BlockManager(64, 8)
    sched = Scheduler(SchedulerConfig(budget=8, max_num_seqs=8, admission="shortest_prompt_first"), bm)
    long, short = Sequence(Request(0, 0.0, (1,) * 100, 2)), Sequence(Request(1, 0.0, (1,) * 4, 2))
    sched.add(long)
    sched.add(short)
    plan = sched.schedule()
    assert plan.prefills[0].seq is short and plan.prefills[0].is_last


def test_decode_first_spends_budget_on_decodes_before_prefill():
    bm = BlockManager(64, 8)
    sched = Scheduler(SchedulerConfig(budget=8, max_num_seqs=8), bm)
    for i in range(3):
        sched.add(Sequence(Request(i, 0.0, (1,) * 2, 5)))
    plan = sched.schedule()
    sched.postprocess(plan, {i: 1 for i in range(3)}, 0, 1)
    sched.add(Sequence(Request(9, 1.0, (1,) * 50, 2)))
    plan = sched.schedule()
    assert plan.num_decode_tokens == 3 and plan.num_prefill_tokens == 5
