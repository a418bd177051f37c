"""Verdicts on the published statements about prefill/decode disaggregation, decided by stage sim_disagg's
tables (SIMULATED): each statement agrees, disagrees or lands within the margin, with the numbers that
decided it. Plain pandas on the stage's CSVs: a table where a statement is false gets `disagrees`.

The margin is a modelling margin, not noise: simulated goodput is exact for its cost model, but the cost
model is not the device, so a winner by less than `margin` (sim_disagg.tie_margin) is called a tie.
The regime verdicts read the points at `verdict_loads` (x N x the single-GPU capacity: around capacity;
far below it every topology serves almost every request, far above it none does); the throughput verdict
reads `throughput_load`, which saturates every topology (sim_disagg's params, in its conditions.json).
"""
from __future__ import annotations

import math

import pandas as pd

from chunklab.report.capacity import crossing

AGREES, DISAGREES, WITHIN = "agrees", "disagrees", "within margin"
SCORE = {AGREES: 1, WITHIN: 0, DISAGREES: -1}  # dvc metrics
# DistServe (Zhong et al., OSDI 2024): "7.4x more requests or 12.6x tighter SLO" than colocated systems,
# "while staying within latency constraints for > 90% of requests": the highest rate per GPU with at
# least 90% of requests within both targets. (Its preprint, arXiv 2401.09670v1, said 4.48x and 10.2x.)
DISTSERVE_GAIN = 7.4
STATEMENTS = {
    "taichi_tight_ttft": ("TaiChi", "colocation wins under tight TTFT with relaxed TPOT"),
    "taichi_strict_tpot": ("TaiChi", "disaggregation wins under strict TPOT with relaxed TTFT"),
    "taichi_balanced": ("TaiChi", "neither wins clearly under balanced SLOs"),
    "vllm_throughput": ("vLLM docs", "disaggregated prefill does not improve throughput"),
    "llmd_large_long": ("llm-d", "P/D pays for large models with long inputs (more than elsewhere)"),
    "distserve_gain": ("DistServe (OSDI'24)", f"up to {DISTSERVE_GAIN}x the rate per GPU with >= 90% of requests "
                       "within SLO, from disaggregation"),
}


def median_ratio(ratios: pd.Series) -> float:
    """The median of disaggregated over colocated goodput (inf where only disaggregation serves any)."""
    r = ratios.dropna()
    return float(r.median()) if len(r) else math.nan


def side(ratio: float, margin: float) -> str:
    """Which side a disaggregated/colocated ratio favours beyond the margin: disaggregated, colocated or tie."""
    if math.isnan(ratio):
        return "none"
    return "disaggregated" if ratio >= 1 + margin else "colocated" if ratio <= 1 / (1 + margin) else "tie"


def counts(w: pd.DataFrame) -> str:
    n = w["winner"].value_counts()
    return (f"colocated wins {n.get('colocated', 0)}, disaggregated {n.get('disaggregated', 0)}, ties "
            f"{n.get('tie', 0)}, neither serves any {n.get('none', 0)} of {len(w)} points")


def loads_text(loads: list[float]) -> str:
    return "load " + ", ".join(f"{x:g}" for x in loads)


def regime_verdict(winners: pd.DataFrame, slo: str, expected: str, margin: float, loads: list[float]) -> tuple[str, str]:
    """expected: colocated, disaggregated or tie (neither clearly): against the median ratio over the
    regime's points at these loads."""
    w = winners[(winners["slo"] == slo) & winners["load"].isin(loads)]
    if w.empty:
        return WITHIN, f"no points of {slo} at {loads_text(loads)}"
    r = median_ratio(w["disagg_over_colocated"])
    found = side(r, margin)
    verdict = AGREES if found == expected else WITHIN if found in ("tie", "none") else DISAGREES
    return verdict, f"{slo}, {loads_text(loads)}: median disaggregated/colocated goodput per GPU {r:.2f} ({counts(w)})"


def throughput_verdict(cells: pd.DataFrame, margin: float, load: float) -> tuple[str, str]:
    """At a load past every topology's capacity (completions/s is the throughput), the best split's completed
    requests per GPU over the best colocated run's, per (pair, N, workload, link); the median decides."""
    top = cells[(cells["load"] == load) & (cells["slo"] == cells["slo"].iloc[0])]
    if top.empty:
        return WITHIN, f"no runs at load {load:g}"
    top = top.assign(per_gpu=top["completed_per_gpu_rps"], offered=top["rate_per_s"] / top["gpus"])
    keys = ["model", "hardware", "gpus", "workload"]
    colo = top[top["topology"] == "colocated"].groupby(keys)["per_gpu"].max()
    split = top[top["topology"] == "disaggregated"].groupby(keys + ["link"])["per_gpu"].max().reset_index()
    ratios = split.apply(lambda row: row["per_gpu"] / colo[tuple(row[k] for k in keys)], axis=1)
    r = float(ratios.median())
    found = side(r, margin)
    verdict = AGREES if found in ("tie", "colocated") else DISAGREES
    served = float((top["per_gpu"] / top["offered"]).median())
    return verdict, (f"load {load:g}: median best split / best colocated completed requests per GPU {r:.2f} (range "
                     f"{ratios.min():.2f}-{ratios.max():.2f}, {len(ratios)} points; a run completes a median "
                     f"{served:.0%} of the offered rate, so the load saturates)")


def large_long_verdict(winners: pd.DataFrame, capacity: pd.DataFrame, margin: float, loads: list[float]) -> tuple[str, str]:
    """The largest model on the long-prompt mix against every other point: agrees when P/D wins there
    beyond the margin and by more than elsewhere."""
    big = capacity.sort_values("model_params_b").iloc[-1]["model"]
    w = winners[winners["load"].isin(loads)]
    here = (w["model"] == big) & (w["workload"] == "long_prompts")
    a, b = median_ratio(w.loc[here, "disagg_over_colocated"]), median_ratio(w.loc[~here, "disagg_over_colocated"])
    if math.isnan(a):
        return WITHIN, f"no long_prompts points of {big}"
    found = side(a, margin)
    verdict = AGREES if found == "disaggregated" and not a < b else WITHIN if found == "tie" else DISAGREES
    return verdict, (f"{big} on long_prompts, {loads_text(loads)}: median disaggregated/colocated {a:.2f} "
                     f"({int(here.sum())} points); every other point: {b:.2f} ({int((~here).sum())} points)")


def grid_capacities(cells: pd.DataFrame) -> pd.DataFrame:
    """Per point (model, hardware, gpus, workload, slo), link and topology: the best setting's capacity
    on the load grid, in loads (x N x the single-GPU capacity: per GPU, the same unit for every
    topology of a point). Each setting's is where its share within the SLO crosses 90% across the
    grid's loads (report/capacity.py's crossing: lo, hi and the interpolated estimate); the best
    setting's bounds are the largest lo and the largest hi over the settings (colocated: every budget
    and policy; disaggregated: every split over that link)."""
    keys = ["model", "hardware", "gpus", "workload", "slo", "link", "topology"]
    rows = []
    for key, g in cells.groupby(keys + ["setting"], sort=False):
        by_load = g.groupby("load")["share_in_slo"].first().sort_index()
        estimate, lo, hi = crossing(list(by_load.index), list(by_load))
        rows.append(dict(zip(keys + ["setting"], key)) | {"estimate": estimate, "lo": lo, "hi": hi})
    per_setting = pd.DataFrame(rows)
    return per_setting.groupby(keys, sort=False).agg(lo=("lo", "max"), hi=("hi", "max"),
                                                     estimate=("estimate", "max")).reset_index()


def gain_verdict(cells: pd.DataFrame, margin: float) -> tuple[str, str]:
    """DistServe's claim on its own metric: per point and link, the best split's capacity per GPU over
    the best colocated setting's, read on the load grid. The grid bounds each ratio: at least the
    split's lo over colocation's hi, at most the split's hi over colocation's lo (unbounded where
    colocation fails at the lowest load or the split passes at the highest). Agrees when some point's
    lower bound reaches DISTSERVE_GAIN (less the margin); disagrees when no point's upper bound does;
    else the grid cannot tell (its loads span max / min: no bracketed ratio can exceed that)."""
    caps = grid_capacities(cells)
    keys = ["model", "hardware", "gpus", "workload", "slo"]
    colo = caps[caps["topology"] == "colocated"].set_index(keys)
    split = caps[caps["topology"] == "disaggregated"]
    if colo.empty or split.empty:
        return WITHIN, "no colocated or no disaggregated runs"
    c = colo.loc[[tuple(r) for r in split[keys].itertuples(index=False)]].reset_index(drop=True)
    split = split.reset_index(drop=True)
    proven = split["lo"] / c["hi"]
    possible = (split["hi"] / c["lo"].where(c["lo"] > 0)).fillna(math.inf)
    loads = sorted(cells["load"].unique())
    span = loads[-1] / loads[0]
    target = DISTSERVE_GAIN / (1 + margin)
    verdict = AGREES if proven.max() >= target else DISAGREES if possible.max() < target else WITHIN
    best = split.loc[proven.idxmax()]
    unbounded = int((possible == math.inf).sum())
    return verdict, (f"capacity per GPU on the load grid ({', '.join(f'{x:g}' for x in loads)}: it spans "
                     f"{span:.1f}x, so a ratio it brackets is at most that): largest gain the grid proves "
                     f"{proven.max():.2f}x ({best['model']} on {best['hardware']}, {int(best['gpus'])} GPUs, "
                     f"{best['workload']}, {best['slo']}, {best['link']}); largest it allows "
                     f"{'unbounded' if math.isinf(possible.max()) else f'{possible.max():.2f}x'}; {unbounded} of {len(split)} points unbounded above (colocation "
                     f"under 90% at the lowest load, or the split over it at the highest)")


def verdicts(winners: pd.DataFrame, cells: pd.DataFrame, capacity: pd.DataFrame, margin: float,
             verdict_loads: list[float], throughput_load: float,
             slos: tuple[str, str, str] = ("disagg_tight_ttft", "disagg_strict_tpot", "disagg_balanced")) -> pd.DataFrame:
    """One row per published statement: source, statement, verdict, the numbers that decided it."""
    tight, strict, balanced = slos
    decided = {
        "taichi_tight_ttft": regime_verdict(winners, tight, "colocated", margin, verdict_loads),
        "taichi_strict_tpot": regime_verdict(winners, strict, "disaggregated", margin, verdict_loads),
        "taichi_balanced": regime_verdict(winners, balanced, "tie", margin, verdict_loads),
        "vllm_throughput": throughput_verdict(cells, margin, throughput_load),
        "llmd_large_long": large_long_verdict(winners, capacity, margin, verdict_loads),
        "distserve_gain": gain_verdict(cells, margin),
    }
    return pd.DataFrame([{"key": k, "source": STATEMENTS[k][0], "statement": STATEMENTS[k][1], "verdict": v,
                          "decided_by": why} for k, (v, why) in decided.items()])
