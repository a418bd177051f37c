"""The prefill-share map's decisions (stages/sim_share.py) on synthetic capacities whose answer is known."""
import pandas as pd

from chunklab.stages.sim_share import HELPS, HURTS, crossover, verdicts


def caps(small_over_large: dict[float, float], seeds=(3, 4, 5, 6, 7)) -> pd.DataFrame:
    """Capacity per (share, seed): budget 8192 at 10 req/s (+ a seed's own offset), budget 64 at that x ratio."""
    rows = []
    for share, ratio in small_over_large.items():
        for k, seed in enumerate(seeds):
            base = 10.0 + k
            rows += [{"share": share, "slo": "s", "budget": 8192, "seed": seed, "capacity_req_per_s": base},
                     {"share": share, "slo": "s", "budget": 64, "seed": seed, "capacity_req_per_s": base * ratio}]
    return pd.DataFrame(rows)


def test_a_small_budget_helps_while_prefills_are_rare_and_hurts_once_they_are_constant():
    v = verdicts(caps({0.05: 1.3, 0.15: 1.2, 0.35: 0.8, 0.6: 0.7}))
    assert list(v["small_budget_effect"]) == [HELPS, HELPS, HURTS, HURTS]
    assert list(v["best_budget"]) == [64, 64, 8192, 8192]
    assert crossover(v) == {"s": 0.35}


def test_no_crossover_when_the_answer_never_changes():
    assert crossover(verdicts(caps({0.05: 0.7, 0.6: 0.7}))) == {"s": None}
    assert crossover(verdicts(caps({0.05: 1.3, 0.6: 1.3}))) == {"s": None}
