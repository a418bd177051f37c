"""The cluster section's verdicts (report/topologies.py) from synthetic runs: an arm wins only when its
range over repeats clears the others', and the comparison with the production maps says when they differ."""
import pandas as pd

from chunklab.report.claims import NOISE
from chunklab.report.topologies import arm_winner, cluster_findings, load_findings, production_comparison


def runs(share: dict[str, list[float]], ttft_s: dict[str, list[float]], load: float = 0.9) -> pd.DataFrame:
    return pd.DataFrame([{"arm": arm, "load": load, "repeat": i, "executor": "measured", "slo_attainment": g,
                          "ttft_p50_s": ttft_s[arm][i], "tpot_p50_s": 0.002} for arm, gs in share.items()
                         for i, g in enumerate(gs)])


def test_an_arm_wins_only_when_its_range_clears_every_other():
    apart = runs({"single": [0.5, 0.51], "replicas": [0.6, 0.62], "pd": [0.4, 0.41]},
                 {"single": [0.2, 0.3], "replicas": [0.05, 0.06], "pd": [0.5, 0.6]})
    assert arm_winner(apart, "slo_attainment", True) == "replicas"
    assert arm_winner(apart, "ttft_p50_s", False) == "replicas"
    overlap = runs({"single": [0.5, 0.61], "replicas": [0.6, 0.62], "pd": [0.4, 0.41]},
                   {"single": [0.2, 0.3], "replicas": [0.25, 0.06], "pd": [0.5, 0.6]})
    assert arm_winner(overlap, "slo_attainment", True) == NOISE
    assert arm_winner(overlap, "ttft_p50_s", False) == NOISE


def maps_dir(tmp_path, winner: str):
    folder = tmp_path / "simulated" / "disagg"
    folder.mkdir(parents=True)
    pd.DataFrame([{"gpus": g, "load": load, "slo": s, "winner": winner if g == 2 else "colocated"}
                  for g in (2, 8) for load in (0.6, 1.0) for s in ("tight", "strict")]).to_csv(folder / "winners.csv")
    return tmp_path


def test_the_measured_pair_is_set_beside_the_maps_and_a_disagreement_is_said(tmp_path):
    measured = runs({"single": [0.5, 0.51], "replicas": [0.6, 0.62], "pd": [0.4, 0.41]},
                    {"single": [0.2, 0.3], "replicas": [0.05, 0.06], "pd": [0.5, 0.6]})
    line = production_comparison(maps_dir(tmp_path / "a", "disaggregated"), measured, 0.9)
    assert "colocated on the share in SLO" in line and "load 1" in line and "differs from" in line
    line = production_comparison(maps_dir(tmp_path / "b", "colocated"), measured, 0.5)
    assert "load 0.6" in line and "agrees with" in line


def test_arms_that_all_meet_the_slo_tie_on_it_and_the_line_says_so():
    measured = runs({"single": [1.0, 1.0], "replicas": [1.0, 1.0], "pd": [1.0, 1.0]},
                    {"single": [0.02, 0.03], "replicas": [0.007, 0.008], "pd": [0.28, 0.29]})
    assert arm_winner(measured, "slo_attainment", True) == NOISE
    line = load_findings(measured, measured.assign(executor="simulated"), 0.9)
    assert "share in SLO" in line and "within noise" in line and "**2 replicas (a core each)** wins" in line
    assert "the simulated twins tie single and replicas and pd" in line


def test_two_arms_level_ahead_of_a_third_are_said_to_tie_ahead_of_it():
    measured = runs({"single": [1.0, 1.0], "replicas": [1.0, 1.0], "pd": [0.8, 0.93]},
                    {"single": [0.09, 0.1], "replicas": [0.02, 0.1], "pd": [0.5, 0.53]})
    assert arm_winner(measured, "slo_attainment", True) == NOISE
    line = load_findings(measured, measured.assign(executor="simulated"), 1.2)
    assert ("share in SLO single 100 [100-100], replicas 100 [100-100], pd 86 [80-93] %: **one engine on both cores "
            "and 2 replicas (a core each)** tie (within noise) ahead of 1 prefill + 1 decode") in line


def test_without_the_stage_the_section_says_it_did_not_run(tmp_path):
    assert "has not run" in cluster_findings(tmp_path)[0]
