"""Verdicts on the published P/D statements (report/disagg.py) from sim_disagg's tables: a table where a
statement is false must say so, one where it is true must agree. Synthetic tables, no simulation."""
import json

import pandas as pd
import pytest

from chunklab.config import SloConfig
from chunklab.report.disagg import AGREES, DISAGREES, WITHIN, gain_verdict, verdicts
from chunklab.report.disagg_text import load, sensitivity_lines
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
    v = verdicts(winners_table(cells, 0.05), cells, capacity, 0.05, LOADS, THROUGHPUT_LOAD)
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


def grid(colocated: list[float], split: list[float], loads=(0.1, 0.2, 2.5)) -> pd.DataFrame:
    """One point's cells: the share within the SLO at each load, of one colocated setting and one split."""
    key = {"model": "small_8b", "hardware": "h100", "gpus": 2, "workload": "azure_conv", "slo": SLOS[0]}
    return pd.DataFrame([key | {"load": load, "link": link, "topology": topology, "setting": setting, "share_in_slo": share}
                         for topology, link, setting, shares in (("colocated", "none", "budget 512", colocated),
                                                                 ("disaggregated", "nvlink4", "1P1D", split))
                         for load, share in zip(loads, shares)])


@pytest.mark.parametrize("colocated, split, expected", [
    ([0.95, 0.5, 0.5], [0.95, 0.95, 0.95], AGREES),  # colocation under 0.2, the split over 2.5: at least 12.5x
    ([0.5, 0.5, 0.5], [0.95, 0.95, 0.95], AGREES),  # colocation under the lowest load: at least 25x
    ([0.95, 0.5, 0.5], [0.95, 0.5, 0.5], DISAGREES),  # both between 0.1 and 0.2: at most 2x
    ([0.95, 0.95, 0.5], [0.95, 0.95, 0.95], WITHIN),  # proven 2.5 / 2.5, the split unbounded above: cannot tell
    ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5], WITHIN),  # neither reaches 90% anywhere: the grid cannot tell
])
def test_distserves_gain_on_capacity_per_gpu(colocated, split, expected):
    """DistServe's claim (7.4x the rate per GPU at >= 90% within SLO) on the grid: agrees when the grid
    proves it, disagrees when no point could reach it, within margin when the grid cannot tell."""
    assert gain_verdict(grid(colocated, split), 0.05)[0] == expected


def test_distserves_gain_reads_the_best_setting_of_each_topology():
    """Loads 1, 2, 16: the split holds 90% at every load; colocation at budget 512 only at 1 (a gain of
    at least 8x: agrees). A second colocated setting holding it to 2 takes that proof away."""
    loads = (1.0, 2.0, 16.0)
    cells = grid([0.95, 0.5, 0.5], [0.95, 0.95, 0.95], loads)
    assert gain_verdict(cells, 0.05)[0] == AGREES
    better = grid([0.95, 0.95, 0.5], [0.95, 0.95, 0.95], loads)
    better = better[better["topology"] == "colocated"].assign(setting="budget 2048")
    assert gain_verdict(pd.concat([cells, better]), 0.05)[0] == WITHIN


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


def write_grid(folder, gain, c: dict) -> None:
    """sim_disagg's files of the synthetic tables above, as the report reads them."""
    cells, capacity = tables(gain)
    folder.mkdir(parents=True)
    cells.to_csv(folder / "cells.csv", index=False)
    winners_table(cells, c["tie_margin"]).to_csv(folder / "winners.csv", index=False)
    capacity.to_csv(folder / "capacity.csv", index=False)
    (folder / "conditions.json").write_text(json.dumps(c))


@pytest.mark.parametrize("strict_there, moves", [(0.5, True), (1.8, False)])
def test_the_sensitivity_table_names_a_verdict_that_moves_with_the_assumed_constants(tmp_path, strict_there, moves):
    c = {"tie_margin": 0.05, "verdict_loads": LOADS, "throughput_load": THROUGHPUT_LOAD}
    write_grid(tmp_path / "simulated" / "disagg", taichi(0.5, 1.8, 1.02), c)  # every TaiChi regime agrees
    write_grid(tmp_path / "simulated" / "sensitivity" / "step_overhead_x2", taichi(0.5, strict_there, 1.02), c)
    (tmp_path / "simulated" / "sensitivity" / "settings.json").write_text(json.dumps({"gpus": [2], "settings": {
        "step_overhead_x2": {"knob": "step_overhead", "factor": 2.0, "fields": ["step_overhead_s"],
                             "values": {"small_8b on h100": {"step_overhead_s": 0.004}}}}}))
    winners, cells, capacity, _ = load(tmp_path)
    lines = sensitivity_lines(tmp_path, c, verdicts(winners, cells, capacity, 0.05, LOADS, THROUGHPUT_LOAD))
    assert lines and "step_overhead_x2: small_8b on h100 step_overhead_s 0.004" in lines[0]
    if moves:
        assert lines[-1].startswith("Verdicts that move within these factors: TaiChi (disaggregation wins under "
                                    "strict TPOT with relaxed TTFT): agrees as assumed, disagrees at step_overhead_x2;")
        assert "TaiChi (colocation wins under tight TTFT" not in lines[-1]  # its regime did not move
    else:
        assert lines[-1] == "No verdict moves within these factors."


def test_each_links_transfer_is_also_priced_at_its_lowest_published_rate():
    """report/disagg_text.drivers: a preset with published_gb_per_s prints the transfer p99's share of the
    TTFT target scaled to that rate; one without prints none."""
    from chunklab.report.disagg_text import drivers

    winners = pd.DataFrame({"model": ["m"], "hardware": ["h"], "slo": ["s"], "load": [0.6], "winner": ["tie"],
                            "colocated_share_in_slo": [1.0], "disagg_share_in_slo": [1.0]})
    cells = pd.DataFrame({"topology": ["disaggregated"], "load": [1.0], "link": ["nvlink4"], "slo_ttft_s": [0.5],
                          "transfer_p50_s": [0.001], "transfer_p99_s": [0.005], "kv_wait_p99_s": [0.0]})
    preset = {"bandwidth_gb_per_s": 450.0, "published_gb_per_s": 180.0, "published_source": "a thread (2024): details"}
    c = {"verdict_loads": [1.0], "links": ["nvlink4"], "link_presets": {"nvlink4": preset}}
    [line] = [x for x in drivers(winners, cells, c) if x.startswith("- KV over")]
    assert "at most 1.0% of the TTFT target" in line
    assert "180 GB/s against the preset's 450 (a thread (2024)), that p99 scaled linearly is 2.5%" in line
    c["link_presets"]["nvlink4"] = preset | {"published_gb_per_s": None}
    [line] = [x for x in drivers(winners, cells, c) if x.startswith("- KV over")]
    assert "published" not in line
