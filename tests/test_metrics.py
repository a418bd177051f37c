"""Metrics from hand-built sequences with known timestamps."""
import pytest

from chunklab.engine.step_log import StepLog

from chunklab.config import EngineConfig, SchedulerConfig, SloConfig
from chunklab.engine.engine import StepRecord
from chunklab.cost_models.step_shape import FEATURES
from chunklab.engine.sequence import Request, Sequence
from chunklab.metrics.records import output_digest, percentile, record
from chunklab.metrics.summary import meets_slo, summarize


def finished(rid, arrival, times, label="short", scheduled=None):
    seq = Sequence(Request(rid, arrival, (1, 2, 3), len(times), label))
    seq.start_prefill()
    seq.first_scheduled_s = arrival if scheduled is None else scheduled
    for i, t in enumerate(times):
        seq.append_token(10 + i, t)
    return seq


def test_record_timings():
    r = record(finished(0, 1.0, [1.5, 1.6, 2.6, 2.7], scheduled=1.2))
    assert r.ttft_s == pytest.approx(0.5)
    assert r.queue_s == pytest.approx(0.2)
    assert r.e2e_s == pytest.approx(1.7)
    assert r.tpot_s == pytest.approx(0.4)  # mean gap hides ...
    assert r.max_gap_s == pytest.approx(1.0)  # ... the one-second stall
    assert r.gaps_s == pytest.approx((0.1, 1.0, 0.1))
    assert r.output_digest == output_digest([10, 11, 12, 13])


def test_rejected_request_is_recorded_not_lost():
    seq = Sequence(Request(7, 0.0, (1,) * 5000, 5))
    seq.reject("too long")
    r = record(seq)
    assert (r.status, r.reason, r.ttft_s) == ("rejected", "too long", None)
    s = summarize([r], StepLog(), 1.0, SloConfig())
    assert s["num_rejected"] == 1 and s["slo_attainment"] == 0


def test_percentile_matches_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentile(range(101), 99) == 99


def test_summary_goodput_and_honest_itl():
    a = finished(0, 0.0, [0.2, 0.22, 0.24, 0.26], "long")  # meets SLO
    b = finished(1, 0.0, [2.0, 2.01, 2.02], "short")  # TTFT 2.0 s: misses
    c = finished(2, 1.0, [1.1, 1.2, 3.2])  # TPOT 1.05 s: misses; a 2 s stall
    steps = StepLog.of([StepRecord(0, 0.01, 8, 56, 1, 8, 0, 100, 0), StepRecord(0.01, 0.03, 8, 0, 0, 8, 0, 100, 0)])
    s = summarize([record(x) for x in (a, b, c)], steps, 4.0, SloConfig(ttft_s=1.0, tpot_s=0.05))
    assert s["goodput_req_per_s"] == pytest.approx(1 / 4)
    assert s["slo_attainment"] == pytest.approx(1 / 3)
    assert s["output_tokens_per_s"] == pytest.approx(10 / 4)
    assert s["worst_stall_s"] == pytest.approx(2.0)
    assert s["itl_max_s"] == pytest.approx(2.0)
    assert s["tpot_p50_s"] == pytest.approx(0.02)  # median of per-request means: 0.01, 0.02, 1.05
    assert s["class_long_ttft_p50_s"] == pytest.approx(0.2)
    assert s["class_short_num_requests"] == 2
    assert s["steps"] == 2 and s["tokens_per_step_max"] == 64
    assert s["prefill_step_share"] == pytest.approx(1 / 2)  # the first step carries 56 prefill tokens


def test_prefill_step_share_counts_steps_that_carry_prefill_tokens():
    a = finished(0, 0.0, [0.2, 0.22])
    steps = StepLog.of([StepRecord(0.01 * i, 0.01, 8, 64 if i % 4 == 0 else 0, 1 if i % 4 == 0 else 0, 8, 0, 100, 0)
                        for i in range(8)])
    s = summarize([record(a)], steps, 1.0, SloConfig(ttft_s=1.0, tpot_s=0.05))
    assert s["prefill_step_share"] == pytest.approx(2 / 8)


def test_itl_p99_slo():
    stall = record(finished(0, 0.0, [0.1] + [0.1 + 0.01 * i for i in range(1, 50)] + [1.0]))
    assert meets_slo(stall, SloConfig(ttft_s=1.0, tpot_s=0.05))  # the mean gap looks fine
    assert not meets_slo(stall, SloConfig(ttft_s=1.0, tpot_s=None, itl_p99_s=0.1))  # the stall does not


def test_isolated_latency_interpolates_and_scales_slowdown():
    from chunklab.metrics.isolation import IsolatedLatency, with_slowdown

    alone = IsolatedLatency(prompt_tokens=(16, 1536), ttft_s=(0.01, 0.16), gap_s=0.005)
    assert alone.ttft_alone_s(776) == pytest.approx(0.085)
    assert alone.ttft_alone_s(3072) == pytest.approx(0.32)  # beyond the grid: proportional
    assert alone.e2e_alone_s(1536, 11) == pytest.approx(0.21)
    rec = record(finished(0, 0.0, [0.5 + 0.01 * i for i in range(3)]))  # 3-token prompt, e2e 0.52 s
    [slow] = with_slowdown([rec], alone)
    assert slow.slowdown == pytest.approx(0.52 / (0.01 + 2 * 0.005))


def test_slowdown_of_an_engine_run_is_over_one():
    # The engine and serving loop as a run drives them, on a simulated clock: with the real engine's
    # wall clock, the isolated runs raced other test workers for the CPU and once read 0.17.
    from chunklab.engine.build import build_engine
    from chunklab.cost_models.linear import LinearCostModel
    from chunklab.engine.replay import replay
    from chunklab.metrics.isolation import IsolatedLatency, with_slowdown
    from helpers import MICRO, requests

    reqs = requests(arrival="all_at_once")
    # a profile whose step costs 1 ms a forward plus 10 us a token: deterministic time, never the machine's speed
    per_token = LinearCostModel(tuple({"forwards": 1e-3, "tokens": 1e-5}.get(f, 0.0) for f in FEATURES))
    eng = build_engine(MICRO, EngineConfig(executor="simulated"), SchedulerConfig(budget=32), per_token)
    result = replay(eng, reqs)
    recs = with_slowdown([record(s) for s in result.sequences], IsolatedLatency.measure(eng, reqs))
    s = summarize(recs, result.steps, result.makespan_s, SloConfig())
    assert s["slowdown_p50"] > 1.5  # twelve requests at once: each waits for the others
    assert min(r.slowdown for r in recs) >= 1.0 - 1e-9  # nobody runs faster in a crowd than alone
    assert "class_long_slowdown_p50" in s and "class_short_slowdown_p50" in s


def test_steps_csv_holds_one_chunk_of_text_at_a_time(tmp_path):
    """A replayed trace has ~10^6 steps: writing them must not hold every row's text at once
    (Python's allocations traced, so the bound does not depend on the machine)."""
    import tracemalloc

    log = StepLog.of(StepRecord(i * 0.1, 1e-3 / (i + 1), i % 8, 7 * i, i % 3, 3, 2, 1000 - i, 0, 0.3 * i)
                     for i in range(60_000))
    tracemalloc.start()
    try:
        log.write_csv(tmp_path / "steps.csv")
        peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert (tmp_path / "steps.csv").stat().st_size > 4 * 2**20  # ~4 MB of text written ...
    assert peak_mb < 20  # ... with ~12 MiB of it held at a time (all 60,000 rows at once: ~38)


def test_steps_csv_written_in_chunks_equals_one_frame(tmp_path):
    """steps.csv is written by hand for speed: the same bytes as pandas' to_csv of the whole frame,
    with NaN empty, floats as repr at every magnitude, shape features and an empty run."""
    odd = (0.0, -0.0, 1e-7, 1e17, 123456789.125, 0.1, 2.5e-5)
    log = StepLog(with_features=True)
    for i in range(2503):
        log.append(StepRecord(i * 0.1, 1e-3 / (i + 1), i % 8, 7 * i, i % 3, 3, 2, 1000 - i, 0,
                              None if i % 5 == 0 else odd[i % len(odd)] * i,
                              None if i % 7 == 0 else [odd[(i + j) % len(odd)] * (j + 1) for j in range(len(FEATURES))]))
    for name, steps in (("run", log), ("empty", StepLog(with_features=True))):
        steps.write_csv(tmp_path / f"{name}-chunked.csv", chunk_rows=1000)
        steps.to_frame().to_csv(tmp_path / f"{name}-whole.csv", index_label="step")
        assert (tmp_path / f"{name}-chunked.csv").read_bytes() == (tmp_path / f"{name}-whole.csv").read_bytes()
    assert len((tmp_path / "run-chunked.csv").read_text().splitlines()) == 2504
    assert (tmp_path / "empty-chunked.csv").read_text().count("\n") == 1  # the header alone


def test_the_table_rule_scores_read_back_records_as_the_record_rule_does():
    """meets_slo_table (the report's rescoring of a CSV) agrees with meets_slo request by request."""
    import dataclasses

    import pandas as pd

    from chunklab.metrics.summary import meets_slo_table
    recs = [record(finished(0, 0.0, [0.1] + [0.1 + 0.01 * i for i in range(1, 50)] + [1.0])),  # a stall
            record(finished(1, 0.0, [2.0, 2.01, 2.02])),  # late first token
            record(finished(2, 1.0, [1.1])),  # one token: no gaps
            record(finished(3, 0.0, [0.2, 0.22, 0.24]))]
    rejected = Sequence(Request(4, 0.0, (1,) * 5000, 5))
    rejected.reject("too long")
    recs.append(record(rejected))
    table = pd.DataFrame([dataclasses.asdict(r) for r in recs]).drop(columns="gaps_s")
    for slo in (SloConfig(ttft_s=1.0, tpot_s=0.05), SloConfig(ttft_s=1.0, tpot_s=None, itl_p99_s=0.1),
                SloConfig(ttft_s=None, tpot_s=0.015), SloConfig(ttft_s=3.0, tpot_s=None)):
        assert list(meets_slo_table(table, slo)) == [meets_slo(r, slo) for r in recs], slo
