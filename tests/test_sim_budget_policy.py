"""The budget-policy verdict (stages/sim_budget_policy.py) decided on synthetic capacities: it holds
when slo_adaptive ties or wins at every point and at more points than any fixed budget, and flips
when it loses one point, or when a fixed budget ties everywhere too."""
from __future__ import annotations

import pandas as pd

from chunklab.stages.sim_budget_policy import LOSES, TIES, WINS, best_fixed, standing, verdict, verdict_text

SEEDS = [3, 4, 5, 6, 7]
NOISE = [0.0, 0.01, -0.01, 0.02, -0.02]  # per seed, shared by every arm: paired, it cancels


def caps(points: dict[tuple[str, str], dict[str, float]]) -> pd.DataFrame:
    """points: (workload, slo) -> {arm: capacity}; each seed's capacity is that times 1 + its noise."""
    return pd.DataFrame([{"workload": w, "slo": slo, "arm": arm, "seed": seed, "capacity_req_per_s": c * (1 + n)}
                         for (w, slo), arms in points.items() for arm, c in arms.items()
                         for seed, n in zip(SEEDS, NOISE)])


def decide(points):
    c = caps(points)
    return standing(c, best_fixed(c)), verdict(standing(c, best_fixed(c)))


def test_holds_when_the_policy_ties_or_wins_everywhere_and_no_budget_does():
    stand, v = decide({("mix", "chapter"): {"budget 64": 5.0, "budget 8192": 9.0, "slo_adaptive": 9.0},
                       ("mix", "stall"): {"budget 64": 8.0, "budget 8192": 4.0, "slo_adaptive": 10.0}})
    by = stand.set_index(["slo", "arm"])["standing"]
    assert by[("chapter", "slo_adaptive")] == TIES and by[("stall", "slo_adaptive")] == WINS
    assert by[("chapter", "budget 64")] == LOSES and by[("stall", "budget 8192")] == LOSES
    assert v["holds"] and v["ties_or_wins"] == {"budget 64": 1, "budget 8192": 1, "slo_adaptive": 2}
    assert "removes the dial: holds" in verdict_text(v)


def test_does_not_hold_where_the_policy_loses_a_point():
    _, v = decide({("mix", "chapter"): {"budget 64": 5.0, "budget 8192": 9.0, "slo_adaptive": 7.0},
                   ("mix", "stall"): {"budget 64": 8.0, "budget 8192": 4.0, "slo_adaptive": 10.0}})
    assert not v["holds"] and v["loses_at"] == ["mix under chapter"]
    assert "does not hold** (it loses at mix under chapter" in verdict_text(v)


def test_does_not_hold_where_a_fixed_budget_ties_everywhere_too():
    _, v = decide({("mix", "chapter"): {"budget 64": 5.0, "budget 8192": 9.0, "slo_adaptive": 9.0},
                   ("mix", "stall"): {"budget 64": 4.0, "budget 8192": 9.0, "slo_adaptive": 9.0}})
    assert not v["holds"] and not v["loses_at"]
    assert "but so does a fixed budget (2 of 2)" in verdict_text(v)


def test_the_summary_says_why_the_dial_stays():
    from chunklab.report.budget_policy import why_not
    tied = {"ties_or_wins": {"b64": 4, "b512": 2, "slo_adaptive": 4, "load_adaptive": 3}}
    assert why_not(tied, 4) == " (it ties or wins at all 4 points, and so does budget 64)"
    short = {"ties_or_wins": {"b64": 4, "b512": 2, "slo_adaptive": 3}}
    assert why_not(short, 4) == " (it ties or wins at 3 of 4 points)"
