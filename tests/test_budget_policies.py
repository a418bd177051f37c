"""Budget policies (engine/policies/: fixed, slo_adaptive, load_adaptive), each pinned on hand-built
scheduler states through the scheduler's public verbs (`stage`, `add`, `schedule`): a decode near its
gap target, no decodes, a queue of long prompts, decodes that alone fill the target. The predictor is
a known quadratic, so the chunk the SLO-aware policy must choose is computed here by brute force."""
from __future__ import annotations

import random

import pytest

from chunklab.config import ConfigError, SchedulerConfig
from chunklab.engine.block_manager import BlockManager
from chunklab.engine.policies import budget_policy
from chunklab.engine.policies.slo_adaptive import DRIFT_MIN_STEPS, HEADROOM, MIN_CHUNK_TOKENS, largest_chunk
from chunklab.engine.scheduler import Scheduler
from chunklab.engine.sequence import Request, Sequence
from chunklab.experiments.compose import compose_run_config


def quadratic_step_s(decode_ctx: list[int], prefill_tokens: int, cached_tokens: int) -> float:
    """A step's seconds: 1 ms fixed, 0.1 ms a decode row, 1 us a context token read, 20 us a prefill
    token, 10 ns a query-key pair of the chunk (quadratic in the chunk, as attention is)."""
    pairs = prefill_tokens * (cached_tokens + prefill_tokens)
    return 1e-3 + 1e-4 * len(decode_ctx) + 1e-6 * sum(decode_ctx) + 2e-5 * prefill_tokens + 1e-8 * pairs


def scheduler(budget_policy: str, step_time=quadratic_step_s, **cfg) -> Scheduler:
    cfg = {"budget": 8192, "max_num_seqs": 8, "budget_policy": budget_policy} | cfg
    return Scheduler(SchedulerConfig(**cfg), BlockManager(4096, 16), step_time)


def decoding(sched: Scheduler, n: int, context: int) -> list[int]:
    """n sequences staged decoding with `context` cached prompt tokens; their decode contexts."""
    for i in range(n):
        sched.stage(Request(100 + i, 0.0, (7,) * context, 50), context, decoding=True)
    return [context + 1] * n


def brute_force_chunk(decode_ctx, cached, target_s, most) -> int:
    fits = [n for n in range(1, most + 1) if quadratic_step_s(decode_ctx, n, cached) <= target_s]
    return max(fits) if fits else min(most, MIN_CHUNK_TOKENS)


# -- slo_adaptive ------------------------------------------------------------------------------------

def test_slo_adaptive_takes_the_largest_chunk_within_the_gap_target():
    sched = scheduler("slo_adaptive", gap_target_s=0.02)
    ctx = decoding(sched, 4, 600)
    sched.add(Sequence(Request(1, 0.0, (7,) * 3000, 8)))
    plan = sched.schedule()
    want = brute_force_chunk(ctx, 0, HEADROOM * 0.02, 3000)
    assert 1 < want < 3000  # the target binds: neither the floor nor the whole prompt
    assert len(plan.decodes) == 4 and plan.num_prefill_tokens == want
    assert quadratic_step_s(ctx, want, 0) <= HEADROOM * 0.02 < quadratic_step_s(ctx, want + 1, 0)


def mean_bound_chunk(kind: str, gaps_s: list[list[float]], target_s: float = 0.02) -> int:
    """The chunk slo_adaptive gives a 3,000-token prompt beside decodes that already took these gaps."""
    sched = scheduler("slo_adaptive", gap_target_s=target_s, gap_target_kind=kind)
    for i, gaps in enumerate(gaps_s):
        seq = sched.stage(Request(100 + i, 0.0, (7,) * 600, 50), 600, decoding=True)
        time_s = 0.0
        for gap_s in gaps:
            time_s += gap_s
            seq.append_token(0, time_s)
    sched.add(Sequence(Request(1, 0.0, (7,) * 3000, 8)))
    return sched.schedule().num_prefill_tokens


def test_slo_adaptive_under_a_mean_gap_bound_spends_what_each_request_saved():
    """Under a mean-gap (TPOT) bound, requests whose gaps ran under the target may take one longer gap:
    the step is cut to what the least-ahead of them can spend (10 gaps of 5 ms under a 20 ms target:
    0.02 x 11 - 0.05 = 0.17 s); one behind its mean gets the target itself, as a step bound would."""
    ahead = [[0.005] * 10, [0.005] * 20]
    ctx = [601, 601]
    assert mean_bound_chunk("step", ahead) == brute_force_chunk(ctx, 0, HEADROOM * 0.02, 3000)
    assert mean_bound_chunk("mean", ahead) == brute_force_chunk(ctx, 0, HEADROOM * 0.17, 3000)
    assert brute_force_chunk(ctx, 0, HEADROOM * 0.02, 3000) < mean_bound_chunk("mean", ahead) < 3000
    behind = ahead + [[0.03] * 5]  # 150 ms over 5 gaps: 30 ms a gap, over the target
    assert mean_bound_chunk("mean", behind) == brute_force_chunk(ctx + [601], 0, HEADROOM * 0.02, 3000)


def test_slo_adaptive_prices_the_chunk_at_its_cached_prefix():
    """A prefill half done (1,500 of 3,000 cached) reads more context per token: a smaller chunk fits."""
    sched = scheduler("slo_adaptive", gap_target_s=0.02)
    ctx = decoding(sched, 4, 600)
    half = sched.stage(Request(1, 0.0, (7,) * 3000, 8), 1500)
    plan = sched.schedule()
    want = brute_force_chunk(ctx, 1500, HEADROOM * 0.02, 1500)
    assert [(c.seq.seq_id, c.num_tokens) for c in plan.prefills] == [(half.seq_id, want)]
    assert want < brute_force_chunk(ctx, 0, HEADROOM * 0.02, 1500)


def test_slo_adaptive_without_decodes_takes_the_whole_prompt():
    sched = scheduler("slo_adaptive", gap_target_s=0.002)  # a target no chunk of this prompt meets
    seq = Sequence(Request(1, 0.0, (7,) * 3000, 8))
    sched.add(seq)
    assert sched.schedule().num_prefill_tokens == 3000


def test_slo_adaptive_a_queue_of_long_prompts_gets_one_chunk_under_the_target():
    """Three 2,000-token prompts waiting behind two decodes: the step's prefill tokens (all the first
    prompt's: one partial prefill at a time) are what the target allows, not the budget."""
    sched = scheduler("slo_adaptive", gap_target_s=0.01)
    ctx = decoding(sched, 2, 200)
    for i in range(3):
        sched.add(Sequence(Request(i + 1, 0.0, (7,) * 2000, 8)))
    plan = sched.schedule()
    want = brute_force_chunk(ctx, 0, HEADROOM * 0.01, 6000)
    assert plan.num_prefill_tokens == want and want < 2000


def test_slo_adaptive_decodes_that_fill_the_target_still_move_a_prefill():
    sched = scheduler("slo_adaptive", gap_target_s=0.001)  # under the 1 ms fixed cost: nothing fits
    decoding(sched, 2, 100)
    sched.add(Sequence(Request(1, 0.0, (7,) * 500, 8)))
    assert sched.schedule().num_prefill_tokens == MIN_CHUNK_TOKENS


def run_reported_at(sched: Scheduler, ratio: float, steps: int) -> list[tuple[int, int]]:
    """`steps` steps, each reported back as having run `ratio` times its prediction. Per step: the
    prefill tokens taken, and the largest chunk whose prediction fits HEADROOM x the target / ratio
    (brute force, on the step's decode contexts and its prefill's cached prefix)."""
    out = []
    for _ in range(steps):
        plan = sched.schedule()
        ctx = [s.num_computed_tokens + 1 for s in plan.decodes]
        first = plan.prefills[0].seq
        pending = sum(c.seq.num_prefill_remaining for c in plan.prefills)
        want = brute_force_chunk(ctx, first.num_computed_tokens, HEADROOM * sched.config.gap_target_s / ratio, pending)
        out.append((plan.num_prefill_tokens, want))
        sched.observe_step(ratio * 0.008, 0.008)
        sched.postprocess(plan, {s.seq_id: 7 for s in plan.decodes} | {c.seq.seq_id: 7 for c in plan.prefills}, 0.0, 0.0)
    return out


def long_prompt_behind_decodes() -> Scheduler:
    sched = scheduler("slo_adaptive", gap_target_s=0.02)
    decoding(sched, 2, 100)
    sched.add(Sequence(Request(1, 0.0, (7,) * 8000, 400)))
    return sched


def test_slo_adaptive_aims_under_the_target_by_the_engine_s_measured_drift():
    """Steps that ran 1.25x their predictions: up to the DRIFT_MIN_STEPS-th the chunk is aimed at the
    target, from then on at the target over 1.25. Steps that ran as predicted change nothing."""
    slow = run_reported_at(long_prompt_behind_decodes(), 1.25, DRIFT_MIN_STEPS + 3)
    assert all(got > want for got, want in slow[:DRIFT_MIN_STEPS])  # not yet corrected
    assert all(got == want for got, want in slow[DRIFT_MIN_STEPS:])
    steady = run_reported_at(long_prompt_behind_decodes(), 1.0, DRIFT_MIN_STEPS + 3)
    assert all(got == want for got, want in steady)


def test_slo_adaptive_reads_drift_only_from_the_steps_it_cut():
    """Short prompts that fit whole, reported at 2x, leave the target alone: only a step the target
    cut says how the steps near the target run."""
    sched = scheduler("slo_adaptive", gap_target_s=0.02, max_num_seqs=16)
    decoding(sched, 2, 100)
    for i in range(DRIFT_MIN_STEPS + 2):
        sched.add(Sequence(Request(10 + i, 0.0, (7,) * 50, 400)))
        assert run_reported_at(sched, 2.0, 1)[0][0] == 50
    sched.add(Sequence(Request(1, 0.0, (7,) * 8000, 400)))
    assert all(got == want for got, want in run_reported_at(sched, 1.0, 3))


def test_largest_chunk_solves_any_increasing_quadratic_exactly():
    rng = random.Random(0)
    for _ in range(500):
        c, b, a = rng.uniform(1e-4, 1e-2), rng.uniform(1e-7, 1e-4), rng.choice([0.0, rng.uniform(1e-11, 1e-7)])
        most = rng.randint(3, 8192)
        f = lambda n: c + b * n + a * n * n  # noqa: E731
        target = rng.uniform(f(1), f(most) * 1.2)
        fits = [n for n in range(1, most + 1) if f(n) <= target]
        want = max(fits) if fits else min(most, MIN_CHUNK_TOKENS)
        assert abs(largest_chunk(f, target, most) - want) <= 1, (a, b, c, most, target)


def test_slo_adaptive_needs_a_predictor_and_a_target():
    with pytest.raises(ConfigError, match="budget_policy='slo_adaptive' predicts step times"):
        budget_policy(SchedulerConfig(budget_policy="slo_adaptive", gap_target_s=0.01))
    with pytest.raises(ConfigError, match="needs scheduler.gap_target_s"):
        budget_policy(SchedulerConfig(budget_policy="slo_adaptive"), quadratic_step_s)


# -- load_adaptive -----------------------------------------------------------------------------------

def test_load_adaptive_small_budget_only_while_prefills_queue_behind_decodes():
    sched = scheduler("load_adaptive", step_time=None, pressure_budget_tokens=256)
    sched.add(Sequence(Request(1, 0.0, (7,) * 3000, 8)))
    assert sched.schedule().num_prefill_tokens == 3000  # no decode running: the large budget

    sched = scheduler("load_adaptive", step_time=None, pressure_budget_tokens=256)
    decoding(sched, 2, 100)
    sched.add(Sequence(Request(1, 0.0, (7,) * 3000, 8)))
    assert sched.schedule().num_prefill_tokens == 3000  # one prefill beside decodes: no pressure

    sched = scheduler("load_adaptive", step_time=None, pressure_budget_tokens=256)
    decoding(sched, 2, 100)
    for i in range(2):
        sched.add(Sequence(Request(i + 1, 0.0, (7,) * 3000, 8)))
    plan = sched.schedule()  # two prefills waiting behind decodes: the pressure budget
    assert plan.num_tokens == 256 and len(plan.decodes) == 2


def test_fixed_is_the_budget_every_step():
    sched = scheduler("fixed", step_time=None, budget=300)
    decoding(sched, 2, 100)
    sched.add(Sequence(Request(1, 0.0, (7,) * 3000, 8)))
    assert sched.schedule().num_tokens == 300


# -- configuration: chosen by name, the gap target from the SLO, bad values in one line ---------------

BASE = ["engine=simulated", "engine.profile=outputs/profiles/machine.json", "tracking=none"]


def test_the_gap_target_is_the_slo_in_force():
    stall = compose_run_config([*BASE, "scheduler=slo_adaptive", "slo=stall_scaled"])
    assert stall.scheduler.budget_policy == "slo_adaptive" and stall.scheduler.gap_target_s == stall.slo.itl_p99_s
    chapter = compose_run_config([*BASE, "scheduler=slo_adaptive", "slo=chapter_scaled"])
    assert chapter.slo.itl_p99_s is None and chapter.scheduler.gap_target_s == chapter.slo.tpot_s
    given = compose_run_config([*BASE, "scheduler=slo_adaptive", "scheduler.gap_target_s=0.003"])
    assert given.scheduler.gap_target_s == 0.003
    # what the target bounds: every step under a p99 gap, each request's mean under a mean gap
    assert (stall.scheduler.gap_target_kind, chapter.scheduler.gap_target_kind, given.scheduler.gap_target_kind) == (
        "step", "mean", "step")
    assert compose_run_config([*BASE, "slo=stall_scaled"]).scheduler.gap_target_s is None  # fixed reads none


@pytest.mark.parametrize("overrides, message", [
    (["scheduler.budget_policy=dial"], "scheduler.budget_policy='dial': must be one of fixed, load_adaptive, slo_adaptive"),
    (["scheduler=slo_adaptive", "slo.tpot_s=null", "slo.itl_p99_s=null"],
     "scheduler.budget_policy=slo_adaptive: the SLO has no gap bound"),
    (["scheduler=load_adaptive", "scheduler.pressure_budget_tokens=4"], "scheduler.pressure_budget_tokens=4: must be >="),
    (["scheduler=slo_adaptive", "scheduler.gap_target_s=0"], "scheduler.gap_target_s=0.0: must be > 0"),
    (["scheduler=slo_adaptive", "scheduler.gap_target_kind=p99"], "scheduler.gap_target_kind='p99': must be step"),
])
def test_bad_budget_policy_values_are_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        compose_run_config([*BASE, *overrides])
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
