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


def test_the_best_budget_s_ties_are_the_budgets_the_paired_rule_cannot_tell_below_it():
    """sim_maps: budget 8192 serves 95% within the SLO; 512 the same requests alike (a tie); 64 one in five
    fewer (decidedly below)."""
    import numpy as np

    from chunklab.stages.sim_maps import best_budget
    base = np.random.default_rng(0).random(400) >= 0.05
    rows, cells = [], []
    for budget, met in ((8192, base), (512, base & (np.arange(400) % 200 != 7)), (64, base & (np.arange(400) % 5 != 0))):
        rows += [{"workload": "w", "load": 1.0, "budget": budget, "seed": 1 + i // 200, "request_id": i % 200,
                  "met": m} for i, m in enumerate(met)]
        cells.append({"workload": "w", "load": 1.0, "budget": budget, "goodput_req_per_s": met.mean(),
                      "ttft_p99_s": 1.0})
    best = best_budget(pd.DataFrame(cells), pd.DataFrame(rows))
    assert best["budget"].item() == 8192 and best["ties"].item() == "512"  # 2 requests of 400 apart: a tie
