"""The measured budget-policy comparison (stages/budget_policy.py) on synthetic requests: capacity on
the grid per arm, and at each rate the policy against each fixed budget by the paired rule; the
standing flips with the data, and arms that did not serve the same requests are refused."""
from __future__ import annotations

import pandas as pd
import pytest

from chunklab.config import SloConfig
from chunklab.report.budget_policy import compare, failures, goals

SLO = SloConfig(ttft_s=1.0, tpot_s=None, itl_p99_s=0.01)
RATES = (2.0, 4.0, 6.0)


def requests(arm: str, late_at: dict[float, int]) -> pd.DataFrame:
    """40 requests a rate on seeds 3-4; at each rate the first late_at[rate] of each seed's miss the
    p99 gap target (20 ms against 10)."""
    rows = []
    for rate in RATES:
        for seed in (3, 4):
            for i in range(20):
                late = i < late_at.get(rate, 0)
                rows.append({"arm": arm, "seed": seed, "rate_per_s": rate, "request_id": i,
                             "label": "long" if i % 3 == 0 else "short", "status": "finished", "output_tokens": 21,
                             "ttft_s": 0.1 + 0.01 * i, "tpot_s": 0.001, "itl_p99_s": 0.02 if late else 0.005,
                             "max_gap_s": 0.02 if late else 0.005})
    return pd.DataFrame(rows)


def test_the_policy_wins_where_its_share_in_slo_is_higher_and_capacity_follows():
    arms = pd.concat([requests("budget 64", {4.0: 6, 6.0: 12}), requests("slo_adaptive", {6.0: 1})])
    caps, loads = compare(arms, "stall", SLO, "slo_adaptive")
    cap = {c["arm"]: c for c in caps}
    assert cap["slo_adaptive"]["capacity"] == "> 6.00"  # passes at every rate of the grid
    assert 2.0 < cap["budget 64"]["capacity_req_per_s"] < 4.0  # 70% at 4 req/s: crosses between 2 and 4
    by = {r["rate_per_s"]: r for r in loads}
    assert by[2.0]["standing"] == "ties" and by[4.0]["standing"] == "wins" and by[6.0]["standing"] == "wins"
    assert by[6.0]["share_fixed"] == pytest.approx(0.4) and by[6.0]["share_policy"] == pytest.approx(0.95)


def test_the_policy_loses_where_its_share_is_lower():
    arms = pd.concat([requests("budget 64", {}), requests("slo_adaptive", {4.0: 10, 6.0: 15})])
    _, loads = compare(arms, "stall", SLO, "slo_adaptive")
    assert [r["standing"] for r in loads] == ["ties", "loses", "loses"]


def test_arms_that_served_other_requests_are_refused():
    mine = requests("slo_adaptive", {})
    arms = pd.concat([requests("budget 64", {}), mine[mine["request_id"] != 7]])
    with pytest.raises(SystemExit, match="did not serve the same requests"):
        compare(arms, "stall", SLO, "slo_adaptive")


def test_the_goal_lines_come_out_either_way():
    """report/budget_policy.goals: the policy's capacity against the best fixed budget's, and its worst
    stall against budget 64's, read off the comparison (flipped by swapping the arms' data)."""
    better = pd.concat([requests("budget 64", {4.0: 6, 6.0: 12}), requests("slo_adaptive", {6.0: 1})])
    caps, loads = compare(better, "stall", SLO, "slo_adaptive")
    text = goals("slo_adaptive", pd.DataFrame(caps), pd.DataFrame(loads))
    assert "capacity > 6.00 against the best fixed budget's (budget 64)" in text and "**at least** it" in text
    assert "worst stall at most 1.00x budget 64's" in text
    worse = pd.concat([requests("budget 64", {6.0: 1}), requests("slo_adaptive", {4.0: 6, 6.0: 12})])
    caps, loads = compare(worse, "stall", SLO, "slo_adaptive")
    text = goals("slo_adaptive", pd.DataFrame(caps), pd.DataFrame(loads))
    assert "against the best fixed budget's (budget 64) > 6.00 req/s, **below** it" in text
    assert "worst stall at most 4.00x budget 64's" in text


def test_the_stall_goal_reads_the_gaps_the_machine_did_not_stretch():
    """A 100 ms gap the machine stretched (metrics/stalls.py) decides the worst stall counting every gap,
    not the goal; a stretched gap of the schedule's own size would."""
    fixed = requests("budget 64", {}).assign(max_clean_gap_s=0.005, num_noisy_gaps=0)
    mine = requests("slo_adaptive", {}).assign(max_clean_gap_s=0.005, num_noisy_gaps=0)
    mine.loc[0, ["max_gap_s", "num_noisy_gaps"]] = 0.1, 1  # one gap of one request, stretched by the machine
    caps, loads = compare(pd.concat([fixed, mine]), "stall", SLO, "slo_adaptive")
    text = goals("slo_adaptive", pd.DataFrame(caps), pd.DataFrame(loads))
    assert "did not stretch at most 1.00x budget 64's at the same rate (goal: within 2x; **met**), 20.00x counting every gap" in text
    mine.loc[0, ["max_clean_gap_s", "num_noisy_gaps"]] = 0.1, 0  # the schedule's own
    caps, loads = compare(pd.concat([fixed, mine]), "stall", SLO, "slo_adaptive")
    text = goals("slo_adaptive", pd.DataFrame(caps), pd.DataFrame(loads))
    assert "at most 20.00x budget 64's at the same rate (goal: within 2x; **missed**)" in text


@pytest.mark.parametrize("unjudged", ["most gaps left out at one rate", "one rate measured before the guard"])
def test_the_stall_goal_falls_back_to_every_gap_unless_every_rate_was_judged(unjudged):
    """The guard's worst stall decides the goal only where it judged every rate of both arms, each leaving
    out at most MAX_NOISY_GAP_SHARE of its gaps: a run slow as a whole would otherwise read as clean."""
    fixed = requests("budget 64", {}).assign(max_clean_gap_s=0.005, num_noisy_gaps=0)
    mine = requests("slo_adaptive", {}).assign(max_clean_gap_s=0.005, num_noisy_gaps=0)
    mine.loc[0, "max_gap_s"] = 0.1
    at = mine["rate_per_s"] == 6.0
    if unjudged == "most gaps left out at one rate":
        mine.loc[at, "num_noisy_gaps"] = 2  # 2 of 20 gaps of every request at 6 req/s: 10%
    else:
        mine.loc[at, ["max_clean_gap_s", "num_noisy_gaps"]] = float("nan")
    caps, loads = compare(pd.concat([fixed, mine]), "stall", SLO, "slo_adaptive")
    text = goals("slo_adaptive", pd.DataFrame(caps), pd.DataFrame(loads))
    assert "worst stall at most 20.00x budget 64's at the same rate (goal: within 2x)." in text
    assert "did not stretch" not in text


def test_failures_count_each_bound_an_arm_broke_from_the_requests():
    """budget 64: 36 of 120 requests over the p99 gap bound, none over TTFT; the policy: 2 late, and a
    TTFT raised past the bound on 3. The shares follow the data, each bound on its own."""
    fixed = requests("budget 64", {4.0: 6, 6.0: 12})
    mine = requests("slo_adaptive", {6.0: 1})
    mine.loc[mine.index[:3], "ttft_s"] = 2.0
    f = failures(pd.concat([fixed, mine]), "stall", SLO)
    assert f["budget 64"]["gap"] == pytest.approx(36 / 120) and f["budget 64"]["ttft"] == 0.0
    assert f["slo_adaptive"]["gap"] == pytest.approx(2 / 120) and f["slo_adaptive"]["ttft"] == pytest.approx(3 / 120)
    assert f["slo_adaptive"]["gap_name"] == "p99 gap"
    mean_gap = failures(fixed, "chapter", SloConfig(ttft_s=1.0, tpot_s=0.0005, itl_p99_s=None))
    assert mean_gap["budget 64"]["gap"] == 1.0 and mean_gap["budget 64"]["gap_name"] == "mean gap"
