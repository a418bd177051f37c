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
