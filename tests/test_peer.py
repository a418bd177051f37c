"""vLLM as a measured peer: the plumbing and the scoring, without vLLM (make peers installs it)."""
import ast
import json
import os
import sys
from pathlib import Path

import pytest

from chunklab.engine.sequence import Request
from chunklab.peers import compare, vllm_peer


def test_the_worker_imports_nothing_of_ours():
    """It runs under the peer venv's python, which has vLLM and not our dependencies."""
    tree = ast.parse(vllm_peer.WORKER.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "vllm" in names and "chunklab" not in names and names <= {"vllm", "asyncio", "json", "os", "sys", "time",
                                                                       "__future__"}


def test_without_the_peer_one_line_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKLAB_VLLM_PEER", str(tmp_path / "absent"))
    with pytest.raises(vllm_peer.PeerUnavailable) as err:
        vllm_peer.peer_python()
    assert "make peers" in str(err.value) and "\n" not in str(err.value)


def test_peer_timestamps_are_scored_by_our_record_code():
    reqs = [Request(0, 0.0, b"\x01" * 10, 3), Request(1, 0.5, b"\x02" * 4, 2)]
    result = {"requests": [{"id": 1, "arrival_s": 0.5, "submitted_s": 0.51, "token_times_s": [0.6, 0.7]},
                           {"id": 0, "arrival_s": 0.0, "submitted_s": 0.0, "token_times_s": [0.2, 0.25, 0.45]}]}
    r0, r1 = vllm_peer.serve_records(result, reqs)
    assert (r0.request_id, r0.prompt_tokens, r0.output_tokens) == (0, 10, 3)
    assert r0.ttft_s == pytest.approx(0.2) and r0.tpot_s == pytest.approx(0.125) and r0.e2e_s == pytest.approx(0.45)
    assert list(r0.gaps_s) == pytest.approx([0.05, 0.2]) and r1.ttft_s == pytest.approx(0.1)
    assert r1.queue_s == pytest.approx(0.01)
    lat = compare.latency([r0, r1])
    assert lat["ttft_p50_s"] == pytest.approx(0.15) and lat["itl_p99_s"] == pytest.approx(0.198)  # gaps 0.05, 0.2 and 0.1


def test_the_table_says_who_is_better_in_each_direction():
    ours = {"before": {"prefill_1x1536_s": 0.3, "static_tokens_per_s": 900.0},
            "after": {"prefill_1x1536_s": 0.2, "static_tokens_per_s": 1000.0}}
    t = compare.table(ours, {"prefill_1x1536_s": 0.25, "static_tokens_per_s": 1200.0}).set_index("measurement")
    assert t.loc["prefill_1x1536", "chunklab after"] == pytest.approx(200.0)  # ms
    assert t.loc["prefill_1x1536", "at least as good as vLLM"] == "yes"  # less time
    assert t.loc["static_tokens_per_s", "after / vLLM"] == pytest.approx(1000 / 1200)
    assert t.loc["static_tokens_per_s", "at least as good as vLLM"] == "no"  # fewer tokens a second
    blank = compare.table(ours, None)
    assert blank["vLLM"].isna().all() and set(blank["at least as good as vLLM"]) == {""}


def test_the_report_states_wins_and_losses(tmp_path):
    from chunklab.report.peer import peer_findings

    ours = {"before": {"prefill_1x1536_s": 0.3, "static_tokens_per_s": 900.0},
            "after": {"prefill_1x1536_s": 0.2, "static_tokens_per_s": 1000.0}}
    compare.table(ours, {"prefill_1x1536_s": 0.25, "static_tokens_per_s": 1200.0}).to_csv(tmp_path / "perf_vs_vllm.csv")
    text = " ".join(peer_findings(tmp_path))
    assert "after is better in 2 of 2" in text and "at least as good in 1 of 2" in text
    assert "static_tokens_per_s (0.83x vLLM's rate)" in text
    compare.table(ours, None).to_csv(tmp_path / "perf_vs_vllm.csv")
    assert "not installed" in " ".join(peer_findings(tmp_path))
    compare.table(None, None).to_csv(tmp_path / "perf_vs_vllm.csv")  # perf without the peer: no rows
    text = " ".join(peer_findings(tmp_path))
    assert "not installed" in text and "after is better" not in text


def test_the_worker_runs_under_the_peer_python_with_vllms_cpu_settings(tmp_path, monkeypatch):
    """A stand-in peer venv (this python) and worker: the spec goes in, the result comes back."""
    peer = tmp_path / "peer"
    (peer / "bin").mkdir(parents=True)
    (peer / "bin" / "python").symlink_to(sys.executable)
    worker = tmp_path / "worker.py"
    worker.write_text("import json, os, sys\nspec = json.load(open(sys.argv[1]))\n"
                      "json.dump({'spec': spec, 'env': {k: os.environ.get(k) for k in "
                      "('VLLM_CPU_OMP_THREADS_BIND', 'OMP_NUM_THREADS', 'VLLM_CPU_NUM_OF_RESERVED_CPU', 'PYTHONPATH')}},"
                      " open(sys.argv[2], 'w'))\n")
    monkeypatch.setenv("CHUNKLAB_VLLM_PEER", str(peer))
    monkeypatch.setattr(vllm_peer, "WORKER", worker)
    out = vllm_peer.run_worker({"budget_tokens": 64}, threads=2)
    assert out["spec"] == {"budget_tokens": 64}
    assert out["env"] == {"VLLM_CPU_OMP_THREADS_BIND": "0-1", "OMP_NUM_THREADS": "2",
                          "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "PYTHONPATH": None}
    worker.write_text("import sys; print('boom'); sys.exit(3)\n")
    with pytest.raises(RuntimeError, match="exit 3.*boom"):
        vllm_peer.run_worker({}, threads=2)


@pytest.mark.slow
def test_vllm_serves_the_same_requests_when_installed():
    try:
        vllm_peer.peer_python()
    except vllm_peer.PeerUnavailable as exc:
        pytest.skip(str(exc))
    p = {"repeats": 1, "prompt_tokens": 64, "prefill_chunks": [64], "static_batch": 2, "static_prompt_tokens": 16,
         "static_new_tokens": 4, "static_budget": 512, "serve_requests": 4, "rate_per_s": 8.0, "seed": 3,
         "budgets": [512]}
    got = compare.theirs(p, [], threads=os.cpu_count())
    assert got["prefill_1x64_s"] > 0 and got["static_tokens_per_s"] > 0 and got["b512_ttft_p50_s"] > 0


def test_offline_rounds_taken_either_side_of_the_peer_are_pooled():
    """perf takes half our prefill/static rounds before vLLM's worker and half after: the table's
    medians are over both halves, and nothing is measured again."""
    def part(prefill_s, tok_s):
        return {v: {"prefill": {1536: [prefill_s]}, "static": [tok_s]} for v in compare.VARIANTS}

    pooled = compare.merged(part(0.07, 2000.0), part(0.09, 1800.0), part(0.08, 1900.0))
    assert pooled["after"]["prefill"][1536] == [0.07, 0.09, 0.08]
    got = compare.ours({"prompt_tokens": 1536, "budgets": []}, [], pooled)
    assert got["after"]["prefill_1x1536_s"] == 0.08 and got["before"]["static_tokens_per_s"] == 1900.0


def test_each_serving_percentile_is_the_median_over_replays(monkeypatch):
    """One replay's p99 is its second-worst request: the table takes, per percentile, the median
    over serve_repeats replays of the same requests, for both engines alike."""
    monkeypatch.setattr(compare, "latency", lambda records: {"ttft_p99_s": records[0], "tpot_p50_s": records[1]})
    got = compare.median_latency([[0.149, 0.001], [0.136, 0.003], [0.400, 0.002]])
    assert got == {"ttft_p99_s": 0.149, "tpot_p50_s": 0.002}
