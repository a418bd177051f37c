"""Synthetic workloads and Azure-format trace replay."""
import statistics
from pathlib import Path

import pytest

from chunklab.config import TraceConfig
from chunklab.workload.azure_trace import TraceError, read_rows, trace_requests
from chunklab.workload.synthetic import synthetic_requests
from helpers import workload

REAL_TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def test_same_config_same_requests_and_seed_changes_them():
    a = synthetic_requests(workload(), 260)
    assert a == synthetic_requests(workload(), 260)
    assert a != synthetic_requests(workload(seed=6), 260)


def test_prompts_differ_per_request_and_keep_their_class():
    reqs = synthetic_requests(workload(num_requests=40), 260)
    assert len({r.prompt_token_ids[:3] for r in reqs}) == 40  # no accidental shared prefixes
    for r in reqs:
        lo, hi = (150, 300) if r.label == "long" else (3, 20)
        assert lo <= len(r.prompt_token_ids) <= hi
        assert 4 <= r.max_output_tokens <= 12
        assert all(0 <= t < 256 for t in r.prompt_token_ids)


def test_arrival_processes():
    n = 4000
    poisson = [r.arrival_s for r in synthetic_requests(workload(num_requests=n, rate_per_s=10.0), 260)]
    gaps = [b - a for a, b in zip(poisson, poisson[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.1, rel=0.08)
    assert statistics.stdev(gaps) / statistics.mean(gaps) == pytest.approx(1.0, rel=0.1)  # CV 1
    bursty = [r.arrival_s for r in synthetic_requests(workload(num_requests=n, rate_per_s=10.0, arrival="gamma", burstiness=0.25), 260)]
    bgaps = [b - a for a, b in zip(bursty, bursty[1:])]
    assert statistics.mean(bgaps) == pytest.approx(0.1, rel=0.1)
    assert statistics.stdev(bgaps) / statistics.mean(bgaps) == pytest.approx(2.0, rel=0.15)  # CV 1/sqrt(shape)
    assert {r.arrival_s for r in synthetic_requests(workload(arrival="all_at_once"), 260)} == {0.0}


def write_trace(path: Path, rows: list[str]) -> Path:
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


ROWS = ["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,3000,109",
        "2023-11-16 18:15:51.2224670,879,55", "2023-11-16 18:15:52.2224670,91,16"]


def trace_workload(path, **trace):
    return workload(kind="trace", num_requests=10, trace=TraceConfig(path=str(path), **trace))


def test_trace_replay_times_lengths_and_clipping(tmp_path):
    path = write_trace(tmp_path / "t.csv", ROWS)
    reqs, stats = trace_requests(trace_workload(path, time_scale=0.5), max_seq_len=2048, vocab_size=260)
    assert [round(r.arrival_s, 6) for r in reqs] == [0.0, round(4.314579 / 2, 6), round(4.541877 / 2, 6), round(5.541877 / 2, 6)]
    assert [len(r.prompt_token_ids) for r in reqs] == [374, 2048 - 109 + 1, 879, 91]
    assert [r.max_output_tokens for r in reqs] == [44, 109, 55, 16]
    assert (stats.num_rows, stats.num_clipped, stats.num_overlong) == (4, 1, 1)
    reqs, stats = trace_requests(trace_workload(path, overlong="reject", start_offset=1), 2048, 260)
    assert len(reqs[0].prompt_token_ids) == 3000 and stats.num_clipped == 0 and stats.num_overlong == 1
    half, _ = trace_requests(trace_workload(path, length_scale=0.5), 2048, 260)
    assert [len(r.prompt_token_ids) for r in half] == [187, 1500, 440, 46]


@pytest.mark.parametrize("bad, message", [
    ("2023-11-16 18:15:46.68,12", "expected 3 fields"),
    ("2023-11-16 18:15:46.68,abc,3", "must be integers"),
    ("yesterday,12,3", "bad TIMESTAMP"),
    ("2023-11-16 18:15:46.68,0,3", "must be >= 1"),
])
def test_malformed_line_is_reported_with_its_line_number(tmp_path, bad, message):
    path = write_trace(tmp_path / "t.csv", ROWS[:2] + [bad])
    with pytest.raises(TraceError, match=rf"t.csv:4: .*{message}"):
        read_rows(path, 0, 10)


def test_bad_header_and_missing_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(TraceError, match="bad.csv:1: header"):
        read_rows(bad, 0, 10)
    with pytest.raises(TraceError, match="no such file"):
        read_rows(tmp_path / "none.csv", 0, 10)


def test_real_azure_trace():
    cfg = workload(kind="trace", num_requests=500, trace=TraceConfig(path=str(REAL_TRACE)))
    reqs, stats = trace_requests(cfg, max_seq_len=2048, vocab_size=260)
    assert len(reqs) == stats.num_rows == 500
    assert reqs[0].arrival_s == 0.0 and reqs[-1].arrival_s > 30  # about 5.5 requests/s
    assert all(b.arrival_s >= a.arrival_s for a, b in zip(reqs, reqs[1:]))
    assert stats.num_clipped > 0 and {r.label for r in reqs} == {"long", "short"}


def test_binary_file_is_a_one_line_error_with_its_line(tmp_path):
    path = tmp_path / "noise.csv"
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,2\n\xff\xfe\x00garbage\n")
    with pytest.raises(TraceError, match=r"noise.csv:3: not UTF-8 text \(byte 0xff"):
        read_rows(path, 0, 10)


@pytest.mark.parametrize("text, message", [("", "empty file"),
                                           ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "no data rows")])
def test_empty_trace_is_an_error(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        read_rows(path, 0, 10)


def test_unsorted_rows_replay_in_time_order_and_are_counted(tmp_path):
    rows = ["2023-11-16 18:15:48.0,10,2", "2023-11-16 18:15:46.0,20,3", "2023-11-16 18:15:47.0,30,4"]
    reqs, stats = trace_requests(trace_workload(write_trace(tmp_path / "t.csv", rows)), 2048, 260)
    assert [r.arrival_s for r in reqs] == [0.0, 1.0, 2.0]  # measured from the earliest row: none negative
    assert [len(r.prompt_token_ids) for r in reqs] == [20, 30, 10]
    assert stats.num_reordered == 3


def test_null_num_requests_reads_every_row(tmp_path):
    path = write_trace(tmp_path / "t.csv", ROWS)
    cfg = workload(kind="trace", num_requests=None, trace=TraceConfig(path=str(path)))
    reqs, stats = trace_requests(cfg, 2048, 260)
    assert len(reqs) == stats.num_rows == len(ROWS)
