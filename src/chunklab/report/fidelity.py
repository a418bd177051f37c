"""Fidelity: the simulated engine against repeats of the real one, metric by metric."""
from __future__ import annotations

import pandas as pd

# metric -> the largest relative error the simulation may have against the real median
GOALS = {"ttft_p50_s": 0.10, "ttft_p95_s": 0.20, "ttft_p99_s": 0.20, "itl_p50_s": 0.10, "itl_p99_s": 0.20,
         "tpot_p50_s": 0.10, "e2e_p50_s": 0.10, "goodput_req_per_s": 0.10}
KEYS = ["intensity", "budget"]


def fidelity_table(runs: pd.DataFrame) -> pd.DataFrame:
    """runs: one row per run with `executor` (torch | simulated), KEYS, rate_per_s and the metrics.
    Returns one row per (metric, intensity, budget), with the arrival rate it resolved to."""
    real = runs[runs["executor"] == "torch"]
    sim = runs[runs["executor"] == "simulated"].set_index(KEYS)
    rows = []
    for metric, goal in GOALS.items():
        for (intensity, budget), group in real.groupby(KEYS):
            values = group[metric]
            median, simulated = float(values.median()), float(sim.loc[(intensity, budget), metric])
            rows.append({"metric": metric, "budget": budget, "rate_per_s": float(group["rate_per_s"].iloc[0]),
                         "intensity": intensity, "real_median": median,
                         "real_min": float(values.min()), "real_max": float(values.max()), "simulated": simulated,
                         "rel_error": abs(simulated - median) / median if median else float("nan"),
                         "goal": goal, "within_real_spread": values.min() <= simulated <= values.max()})
    table = pd.DataFrame(rows)
    table["met"] = table["rel_error"] <= table["goal"]
    return table


def step_error_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Measured / predicted step time by step kind over every real run: where the model is off."""
    kind = ("decode " + steps["num_decode_tokens"].clip(upper=1).map({0: "no", 1: "yes"})
            + ", prefill chunks " + steps["num_prefill_chunks"].clip(upper=3).astype(str).str.replace("3", "3+"))
    ratio = steps["duration_s"] / steps["predicted_s"]
    out = (pd.DataFrame({"step kind": kind, "ratio": ratio, "duration_s": steps["duration_s"]})
           .groupby("step kind").agg(steps=("ratio", "size"), median_measured_ms=("duration_s", "median"),
                                     ratio_p10=("ratio", lambda v: v.quantile(0.1)), ratio_p50=("ratio", "median"),
                                     ratio_p90=("ratio", lambda v: v.quantile(0.9)), ratio_max=("ratio", "max")))
    out["median_measured_ms"] *= 1e3
    return out.reset_index()
