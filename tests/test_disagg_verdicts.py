"""Verdicts on the published P/D statements (report/disagg.py) from sim_disagg's tables: a table where a
statement is false must say so, one where it is true must agree. Synthetic tables, no simulation."""
import pandas as pd
import pytest

from chunklab.config import SloConfig
from chunklab.report.disagg import AGREES, DISAGREES, WITHIN, verdicts
from chunklab.stages.sim_disagg import DRIVERS, MIN_COLOCATED_SHARE, winners_table, tidy

SLOS = ("disagg_tight_ttft", "disagg_strict_tpot", "disagg_balanced")
MODELS = {"small_8b": 8.0, "big_12b": 12.2}
LOADS, THROUGHPUT_LOAD = [1.0], 2.5


def tables(gain, throughput=1.0):
    """cells, capacity: colocated serves half its requests in SLO; the split serves half x gain(model,
    workload, slo); completed per GPU colocated 1.0, split `throughput`."""
    rows = []
    for model in MODELS:
        for workload in ("long_prompts", "azure_conv"):
            for slo in SLOS:
                for load in (*LOADS, THROUGHPUT_LOAD, MIN_COLOCATED_SHARE):
                    key = {"model": model, "hardware": "h100", "gpus": 2, "workload": workload, "slo": slo,
                           "slo_ttft_s": 1.0, "slo_tpot_s": 0.02, "load": load, "rate_per_s": 4.0}
                    share = 0.5 * gain(model, workload, slo)
                    rows += [key | {"link": "none", "topology": "colocated", "prefill": 0, "decode": 0, "budget": 256,
                                    "setting": "budget 256", "share_in_slo": 0.5, "goodput_per_gpu_rps": 1.0, "completed_per_gpu_rps": 1.0},
                             key | {"link": "nvlink4", "topology": "disaggregated", "prefill": 1, "decode": 1,
                                    "budget": 8192, "setting": "1P1D", "share_in_slo": share, "goodput_per_gpu_rps": 2.0 * share,
                                    "completed_per_gpu_rps": throughput}]
    cells = pd.DataFrame(rows).assign(**{d: 0.0 for d in DRIVERS})
    capacity = pd.DataFrame([{"model": m, "model_params_b": b} for m, b in MODELS.items()])
    return cells, capacity


def judged(gain, throughput=1.0) -> dict[str, str]:
    cells, capacity = tables(gain, throughput)
    v = verdicts(winners_table(cells, 0.05), cells, capacity, 0.05, LOADS, THROUGHPUT_LOAD, MIN_COLOCATED_SHARE)
    return dict(zip(v["key"], v["verdict"]))


def taichi(tight, strict, balanced):
    return lambda model, workload, slo: {"disagg_tight_ttft": tight, "disagg_strict_tpot": strict,
                                         "disagg_balanced": balanced}[slo]


def test_taichis_regimes_agree_when_the_table_says_what_taichi_says():
    v = judged(taichi(0.5, 1.8, 1.02))
    assert (v["taichi_tight_ttft"], v["taichi_strict_tpot"], v["taichi_balanced"]) == (AGREES, AGREES, AGREES)


def test_taichis_regimes_disagree_when_the_table_contradicts_them():
    v = judged(taichi(1.8, 0.5, 1.5))
    assert (v["taichi_tight_ttft"], v["taichi_strict_tpot"], v["taichi_balanced"]) == (DISAGREES, DISAGREES, DISAGREES)
    v = judged(taichi(1.02, 0.99, 1.0))  # a lead under the margin decides nothing
    assert (v["taichi_tight_ttft"], v["taichi_strict_tpot"]) == (WITHIN, WITHIN)


@pytest.mark.parametrize("throughput, expected", [(1.0, AGREES), (1.03, AGREES), (0.8, AGREES), (1.3, DISAGREES)])
def test_vllms_no_throughput_gain(throughput, expected):
    assert judged(taichi(1, 1, 1), throughput)["vllm_throughput"] == expected


@pytest.mark.parametrize("there, elsewhere, expected", [(2.0, 1.0, AGREES), (0.5, 1.0, DISAGREES),
                                                        (1.5, 1.8, DISAGREES), (1.01, 1.0, WITHIN)])
def test_llmd_large_models_long_inputs(there, elsewhere, expected):
    gain = lambda model, workload, slo: there if (model, workload) == ("big_12b", "long_prompts") else elsewhere  # noqa: E731
    assert judged(gain)["llmd_large_long"] == expected


@pytest.mark.parametrize("largest, expected", [(1.9, AGREES), (1.5, DISAGREES)])
def test_distserves_gain(largest, expected):
    """Colocated goodput set so that the largest split/colocated ratio is 4.48 x largest / 1.9: 4.48 itself
    (agrees), or 3.54 (beyond the margin below it: disagrees)."""
    cells, capacity = tables(lambda m, w, s: largest if (m, w, s) == ("small_8b", "azure_conv", SLOS[0]) else 1.0)
    cells.loc[cells["topology"] == "colocated", "goodput_per_gpu_rps"] = 2.0 * 0.5 * 1.9 / 4.48
    v = verdicts(winners_table(cells, 0.05), cells, capacity, 0.05, LOADS, THROUGHPUT_LOAD, MIN_COLOCATED_SHARE)
    assert dict(zip(v["key"], v["verdict"]))["distserve_gain"] == expected


def test_distserves_gain_ignores_points_where_colocation_barely_serves():
    """A 20x ratio over a colocated share of 2% is overload, not topology: it decides nothing."""
    cells, capacity = tables(lambda m, w, s: 1.0)
    hit = (cells["model"] == "small_8b") & (cells["workload"] == "azure_conv") & (cells["slo"] == SLOS[0])
    cells.loc[hit & (cells["topology"] == "colocated"), ["share_in_slo", "goodput_per_gpu_rps"]] = [0.02, 0.05]
    v = verdicts(winners_table(cells, 0.05), cells, capacity, 0.05, LOADS, THROUGHPUT_LOAD, MIN_COLOCATED_SHARE)
    assert dict(zip(v["key"], v["verdict"]))["distserve_gain"] == DISAGREES


def test_winners_call_a_lead_under_the_margin_a_tie_and_no_goodput_none():
    cells, _ = tables(lambda m, w, s: 1.04 if s == SLOS[0] else 1.0)
    cells.loc[(cells["slo"] == SLOS[1]), ["goodput_per_gpu_rps", "share_in_slo"]] = 0.0
    w = winners_table(cells, 0.05)
    assert set(w[w["slo"] == SLOS[0]]["winner"]) == {"tie"}
    assert set(w[w["slo"] == SLOS[1]]["winner"]) == {"none"}


def test_a_budget_policys_run_is_judged_under_its_own_slo_set_only():
    """tidy: a fixed colocated run gives a row per SLO set; a policy's run (aimed at one set's gap) gives one."""
    sets = {"tight": SloConfig(ttft_s=1.0, tpot_s=0.01, itl_p99_s=None),
            "loose": SloConfig(ttft_s=2.0, tpot_s=0.05, itl_p99_s=None)}
    point = {"model": "m", "hardware": "h100", "gpus": 2, "workload": "w", "load": 1.0, "rate_per_s": 4.0,
             "link": "none", "topology": "colocated", "prefill": 0, "decode": 0}
    keys = [point | {"budget": 512, "setting": "budget 512", "policy": "fixed", "policy_slo": ""},
            point | {"budget": 8192, "setting": "slo_adaptive", "policy": "slo_adaptive", "policy_slo": "tight"}]
    summary = {"slo_attainment@tight": 0.5, "slo_attainment@loose": 0.9, "requests_per_s": 3.0}
    cells = tidy(keys, [summary, summary], {("m", "h100"): sets})
    assert list(zip(cells["setting"], cells["slo"])) == [("budget 512", "tight"), ("budget 512", "loose"),
                                                        ("slo_adaptive", "tight")]
