"""The worst stall the schedule caused, apart from the machine's (metrics/stalls.py), on hand-built
timelines: steps back to back, each emitting one token of one request at its end."""
import pytest

from chunklab.engine.engine import StepRecord
from chunklab.engine.sequence import Request, Sequence
from chunklab.engine.step_log import StepLog
from chunklab.metrics.records import record
from chunklab.metrics.stalls import stall_summary, with_clean_gaps


def timeline(durations_s, predicted_s):
    """Steps back to back from t=0, and the end of each (where its token lands)."""
    steps, ends, t = [], [], 0.0
    for d, p in zip(durations_s, predicted_s):
        steps.append(StepRecord(t, d, 1, 0, 0, 1, 0, 100, 0, p))
        t += d
        ends.append(t)
    return StepLog.of(steps), ends


def served(times_s):
    seq = Sequence(Request(0, 0.0, (1, 2, 3), len(times_s)))
    seq.start_prefill()
    seq.first_scheduled_s = 0.0
    for i, t in enumerate(times_s):
        seq.append_token(10 + i, t)
    return seq


def test_a_stolen_step_is_left_out_and_a_long_chunk_is_not():
    # a 12 ms step that ran 113 ms (the VM's), and a 130 ms chunk that ran 140 ms (the schedule's)
    steps, ends = timeline([0.010, 0.113, 0.010, 0.140, 0.010], [0.010, 0.012, 0.010, 0.130, 0.010])
    seq = served(ends)
    [r] = with_clean_gaps([record(seq)], [seq], steps)
    assert r.max_gap_s == pytest.approx(0.140)
    assert r.max_clean_gap_s == pytest.approx(0.140)
    assert r.num_noisy_gaps == 1  # the gap ending with the stolen step

    steps, ends = timeline([0.010, 0.113, 0.010, 0.020, 0.010], [0.010, 0.012, 0.010, 0.020, 0.010])
    seq = served(ends)
    [r] = with_clean_gaps([record(seq)], [seq], steps)
    assert r.max_gap_s == pytest.approx(0.113)
    assert r.max_clean_gap_s == pytest.approx(0.020)
    summary = stall_summary([r])
    assert summary["worst_clean_stall_s"] == pytest.approx(0.020)
    assert summary["noisy_gap_share"] == pytest.approx(1 / 4)


def test_a_gap_spanning_several_steps_is_priced_by_all_of_them():
    # the request skips a token at the second step (preempted, say): its gap spans two steps
    steps, ends = timeline([0.010, 0.030, 0.030, 0.010], [0.010, 0.020, 0.020, 0.010])
    seq = served([ends[0], ends[2], ends[3]])
    [r] = with_clean_gaps([record(seq)], [seq], steps)
    assert r.max_clean_gap_s == pytest.approx(0.060)  # 60 ms against 40 ms predicted: the schedule's
    assert r.num_noisy_gaps == 0


def test_unjudged_runs_keep_their_records():
    steps, ends = timeline([0.010, 0.113], [None, None])  # no profile: nothing to judge against
    seq = served(ends)
    [r] = with_clean_gaps([record(seq)], [seq], steps)
    assert r.max_clean_gap_s is None and r.num_noisy_gaps is None
    assert stall_summary([r]) == {}


def test_a_gap_is_priced_by_its_own_steps_only():
    # 30 ms against 14 ms predicted: the machine's, however long the step after it is predicted to run
    steps, ends = timeline([0.010, 0.030, 0.100], [0.010, 0.014, 0.100])
    seq = served(ends)
    [r] = with_clean_gaps([record(seq)], [seq], steps)
    assert r.num_noisy_gaps == 1
    assert r.max_clean_gap_s == pytest.approx(0.100)


def test_a_request_whose_every_gap_was_stretched_has_no_clean_worst_gap():
    steps, ends = timeline([0.010, 0.113], [0.010, 0.012])
    seq = served(ends)
    [r] = with_clean_gaps([record(seq)], [seq], steps)
    assert r.max_clean_gap_s == 0.0 and r.num_noisy_gaps == 1  # none counts toward the worst
    assert stall_summary([r]) == {"worst_clean_stall_s": 0.0, "noisy_gap_share": 1.0}
