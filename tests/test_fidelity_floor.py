"""The fidelity section's headline: each point's paired error over the machine's repeat-vs-repeat floor."""
import pandas as pd
import pytest

from chunklab.stages.fidelity_tables import against_floor, floor_table, metrics


def paired(errors: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"point": ["b64", "b64", "b512", "b512"], "metric": ["ttft", "e2e"] * 2,
                         "median_rel_error": errors, "p90_rel_error": [0.5] * 4, "n": [300] * 4})


def test_error_over_floor_and_the_absolute_goal():
    sim, floor = paired([0.30, 0.04, 0.10, 0.20]), paired([0.60, 0.05, 0.05, 0.20])
    t = against_floor(sim, floor).set_index(["point", "metric"])
    assert t.loc[("b64", "ttft"), "error_over_floor"] == pytest.approx(0.5)  # closer than a rerun
    assert t.loc[("b512", "ttft"), "error_over_floor"] == pytest.approx(2.0)  # twice the noise: a real miss
    assert t["goal_5pct_met"].tolist() == [False, True, False, False]
    m = metrics(sim.assign(point=sim["point"] + " load 0.85"), pd.DataFrame({"met": [True]}),
                floor.assign(point=floor["point"] + " load 0.85"))
    assert m["error_over_floor_max"] == pytest.approx(2.0) and m["points_at_or_under_floor"] == pytest.approx(0.75)


def test_the_headline_table_has_error_floor_and_ratio_per_metric():
    md = floor_table(paired([0.30, 0.04, 0.10, 0.20]), paired([0.60, 0.05, 0.05, 0.20]))
    header = md.splitlines()[0]
    assert header.index("ttft error") < header.index("ttft floor") < header.index("ttft error / floor")
    assert "| b64 " in md and "0.500" in md and "2.000" in md
