"""The production-scale policy verdict (stages/sim_policy_production.py) on synthetic capacities: an
arm ties or wins within `tie` of the point's best fixed budget; the goals flip with the data."""
from __future__ import annotations

import pandas as pd

from chunklab.stages.sim_policy_production import standing, verdict, verdict_text


def caps(points: dict[str, dict[str, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"model": "m", "hardware": hw, "workload": "w", "arm": arm, "capacity_req_per_s": c}
                         for hw, arms in points.items() for arm, c in arms.items()])


def test_the_policy_meets_the_goals_where_it_is_within_the_tie_everywhere():
    v = verdict(standing(caps({"h100": {"budget 512": 8.0, "budget 2048": 10.0, "slo_adaptive": 9.85},
                               "a100": {"budget 512": 4.0, "budget 2048": 1.0, "slo_adaptive": 4.1}}), 0.02))
    assert v["share"] == 1.0 and v["coverage_met"] and v["more_than_any_fixed"]
    assert v["ties_or_wins"] == {"budget 512": 1, "budget 2048": 1, "slo_adaptive": 2}
    assert "at 100% of 2 points** (goal 95%: met)" in verdict_text(v, 0.02)


def test_a_point_short_of_the_tie_misses_the_coverage_goal_and_is_named():
    v = verdict(standing(caps({"h100": {"budget 512": 8.0, "budget 2048": 10.0, "slo_adaptive": 9.7},
                               "a100": {"budget 512": 4.0, "budget 2048": 1.0, "slo_adaptive": 4.1}}), 0.02))
    assert v["share"] == 0.5 and not v["coverage_met"] and not v["more_than_any_fixed"]
    assert v["loses_at"] == ["m on h100, w (0.970x budget 2048)"]


def test_a_fixed_budget_that_ties_everywhere_too_is_not_beaten():
    v = verdict(standing(caps({"h100": {"budget 512": 10.0, "slo_adaptive": 10.0},
                               "a100": {"budget 512": 4.0, "slo_adaptive": 4.0}}), 0.02))
    assert v["coverage_met"] and not v["more_than_any_fixed"]


def test_an_arm_below_its_floor_is_neither_best_nor_tied_and_its_bound_is_named():
    c = caps({"h100": {"budget 512": 8.0, "budget 2048": 10.0, "budget 8192": float("nan"), "slo_adaptive": float("nan")}})
    c["below_req_per_s"] = [float("nan"), float("nan"), 4.0, 4.0]
    stand = standing(c, 0.02)
    assert list(stand["best_fixed"].unique()) == ["budget 2048"] and stand["ties_or_wins"].tolist() == [False, True, False, False]
    v = verdict(stand)
    assert v["share"] == 0.0 and v["loses_at"] == ["m on h100, w (< 0.400x budget 2048)"]


def test_a_floor_above_the_capacity_ends_the_search_and_one_below_it_changes_nothing():
    """Real simulated runs (Llama-3-8B on H100, 40 requests): the floor only ever spends one probe."""
    from chunklab.experiments.compose import compose_run_config
    from chunklab.stages.sim_policy_production import cell_capacity
    cfg = compose_run_config(["engine=simulated", "tracking=none", "model=llama3_8b", "hardware=h100",
                              "workload=ch10_production", "workload.num_requests=40", "slo=production"])
    key = {"arm": "budget 512"}
    free = cell_capacity((key, cfg, [1], 0.9, 0.05, None))
    assert free["capacity_req_per_s"] > 0 and free["below_req_per_s"] != free["below_req_per_s"]
    under = cell_capacity((key, cfg, [1], 0.9, 0.05, free["capacity_req_per_s"] / 2))
    assert under["capacity_req_per_s"] == free["capacity_req_per_s"] and under["probes"] == free["probes"] + 1
    over = cell_capacity((key, cfg, [1], 0.9, 0.05, free["capacity_req_per_s"] * 4))
    assert over["probes"] == 1 and over["below_req_per_s"] == free["capacity_req_per_s"] * 4
    assert over["capacity_req_per_s"] != over["capacity_req_per_s"]


def test_a_floor_share_that_could_hide_a_tie_is_refused_in_one_line():
    import dataclasses
    from pathlib import Path
    import pytest
    from chunklab.stages.common import read_section
    from chunklab.stages.sim_policy_production import SimPolicyProductionParams, jobs
    p = read_section(Path(__file__).resolve().parents[1] / "params.yaml", "sim_policy_production", SimPolicyProductionParams)
    with pytest.raises(SystemExit, match=r"floor_share 0.99 must be in \(0, 1 - tie = 0.98\]"):
        jobs(dataclasses.replace(p, floor_share=0.99))
