"""REPORT findings of the topologies stage (outputs/topologies/): which arm wins at each load on this
machine's two cores (MEASURED, over repeats), whether the simulated twins rank the arms the same way,
how far the twins are from the measured runs per request beside the repeat-vs-repeat floor, and what
the production maps (stage sim_disagg, SIMULATED) predict for two instances at the nearest load.

An arm wins a metric only when its range over the repeats clears every other arm's range (the rule
of report/claims.py); otherwise the arms are within noise of each other on that metric.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.report.claims import NOISE

ARM_NAMES = {"single": "one engine on both cores", "replicas": "2 replicas (a core each)",
             "pd": "1 prefill + 1 decode (a core each, KV through shared memory)"}
# (column, name, higher is better, unit, scale): the share of requests within the SLO decides first (goodput
# at one offered rate, without the makespan's tail of the last request); then the latencies
METRICS = (("slo_attainment", "share in SLO", True, "%", 100.0), ("ttft_p50_s", "TTFT p50", False, "ms", 1e3),
           ("tpot_p50_s", "TPOT p50", False, "ms", 1e3))
MAP_SIDE = {"replicas": "colocated", "pd": "disaggregated"}  # the measured arms the production maps compare


def leaders(runs: pd.DataFrame, metric: str, higher_is_better: bool) -> tuple[list[str], list[str]]:
    """(leaders, behind): the arm with the best median and every arm whose range over repeats overlaps
    its range, then the arms whose ranges it clears. runs: one load's measured runs (columns arm, metric)."""
    values = {arm: g[metric].dropna() for arm, g in runs.groupby("arm", sort=False)}
    values = {arm: v for arm, v in values.items() if len(v)}
    ranked = sorted(values, key=lambda a: values[a].median(), reverse=higher_is_better)
    if not ranked:
        return [], []
    best = values[ranked[0]]
    cleared = (lambda v: best.min() > v.max()) if higher_is_better else (lambda v: best.max() < v.min())
    behind = [a for a in ranked[1:] if cleared(values[a])]
    return [a for a in ranked if a not in behind], behind


def arm_winner(runs: pd.DataFrame, metric: str, higher_is_better: bool) -> str:
    """The arm whose range over repeats clears every other arm's range in the better direction; NOISE otherwise."""
    ahead, behind = leaders(runs, metric, higher_is_better)
    return ahead[0] if len(ahead) == 1 and behind else NOISE


def _verdict(runs: pd.DataFrame, metric: str, higher_is_better: bool) -> str:
    ahead, behind = leaders(runs, metric, higher_is_better)
    name = lambda arms: " and ".join(ARM_NAMES.get(a, a) for a in arms)  # noqa: E731
    if not behind:
        return "the arms are within noise of each other"
    if len(ahead) == 1:
        return f"**{name(ahead)}** wins"
    return f"**{name(ahead)}** tie (within noise) ahead of {name(behind)}"


def _ranges(runs: pd.DataFrame, metric: str, unit: str, scale: float) -> str:
    parts = []
    for arm, g in runs.groupby("arm", sort=False):
        v = g[metric].dropna() * scale
        d = 2 if metric.startswith("tpot") else 1 if unit == "ms" else 0
        parts.append(f"{arm} {v.median():.{d}f} [{v.min():.{d}f}-{v.max():.{d}f}]")
    return ", ".join(parts) + f" {unit}"


def _sim_first(sim: pd.DataFrame, metric: str, higher_is_better: bool) -> str:
    """What the simulated twins (one run per arm) say: the arm they put first, or that the top arms tie."""
    if sim.empty:
        return "the simulated twins did not run"
    ranked = sim.sort_values(metric, ascending=not higher_is_better)
    if len(ranked) > 1 and ranked[metric].iloc[0] == ranked[metric].iloc[1]:
        top = ranked.loc[ranked[metric] == ranked[metric].iloc[0], "arm"]
        return "the simulated twins tie " + " and ".join(dict.fromkeys(top))
    return f"the simulated twins put {ranked['arm'].iloc[0]} first"


def load_findings(measured: pd.DataFrame, simulated: pd.DataFrame, load: float) -> str:
    """One line for one load: each metric's ranges, its measured winner (or within noise), the twins' first."""
    parts = []
    for metric, name, higher, unit, scale in METRICS:
        said = _verdict(measured, metric, higher)
        sim = _sim_first(simulated, metric, higher)
        parts.append(f"{name} {_ranges(measured, metric, unit, scale)}: {said}; {sim}")
    return f"- Load {load:g} of the measured capacity (MEASURED, median [min-max] over repeats): " + "; ".join(parts) + "."


def production_comparison(outputs: Path, measured: pd.DataFrame, load: float) -> str | None:
    """The measured replicas-vs-P/D goodput verdict beside the production maps' winners at 2 GPUs and the
    load nearest this one (SIMULATED), per SLO set; None without the maps."""
    path = outputs / "simulated" / "disagg" / "winners.csv"
    if not path.is_file():
        return None
    maps = pd.read_csv(path)
    two = maps[maps["gpus"] == 2]
    if two.empty:
        return None
    nearest = min(two["load"].unique(), key=lambda x: abs(x - load))
    at = two[two["load"] == nearest]
    counts = "; ".join(f"{slo}: " + ", ".join(f"{side} {n}" for side, n in g["winner"].value_counts().items())
                       for slo, g in at.groupby("slo", sort=False))
    overall = at["winner"].value_counts().idxmax()
    pair = measured[measured["arm"].isin(MAP_SIDE)]
    win = arm_winner(pair, "slo_attainment", True)
    ours = MAP_SIDE.get(win, "tie")
    agree = "agrees with" if ours == overall else "differs from"
    return (f"  - Replicas against P/D here: {ours if win != NOISE else 'within noise (a tie)'} on the share in SLO "
            f"(goodput at this rate). The "
            f"production maps at 2 GPUs, load {nearest:g} (SIMULATED; points won per SLO set: {counts}) most often "
            f"say {overall}: this machine {agree} them.")


def cluster_findings(outputs: Path) -> list[str]:
    folder = outputs / "topologies"
    if not (folder / "runs.csv").is_file():
        return ["The topologies stage has not run in this repro (`dvc repro topologies`): no measured cluster to report."]
    runs = pd.read_csv(folder / "runs.csv")
    paired = pd.read_csv(folder / "paired.csv")
    out = []
    for load, measured in runs[runs["executor"] == "measured"].groupby("load"):
        simulated = runs[(runs["executor"] == "simulated") & (runs["load"] == load)]
        out.append(load_findings(measured, simulated, load))
        line = production_comparison(outputs, measured, load)
        if line:
            out.append(line)
    for metric, g in paired.groupby("metric", sort=False):
        over = (g["median_rel_error"] > g["median_rel_error_floor"]).sum()
        out.append(f"- Paired {metric.upper()} error of the simulated twins: median {g['median_rel_error'].min():.0%}-"
                   f"{g['median_rel_error'].max():.0%} over the points, against a repeat-vs-repeat floor of "
                   f"{g['median_rel_error_floor'].min():.0%}-{g['median_rel_error_floor'].max():.0%}; "
                   f"{over} of {len(g)} points above their floor.")
    return out
