"""Capacity per budget and SLO, measured on the load grid: the fidelity stage's runs (five seeds of
the same arrivals at each load, every budget) scored under each SLO after they ran.

Capacity is the highest arrival rate at which at least `target` of the requests meet the SLO (the
capacity stage's definition, and its run length). Here the share within the SLO is measured at the
grid's rates, pooled over the seeds, and capacity is where it crosses the target, interpolated
linearly in log-rate between the two loads that bracket it; below the lowest load or above the
highest, only the bound is known. Per seed the same gives the spread over arrival draws.
"""
from __future__ import annotations

import math

import pandas as pd

from chunklab.config import SloConfig
from chunklab.metrics.summary import meets_slo_table

HEADING = "### Capacity per budget and SLO: measured on the load grid"
TARGET = 0.9


def crossing(rates: list[float], shares: list[float], target: float = TARGET) -> tuple[float, float, float]:
    """(estimate, lo, hi) req/s from shares within the SLO at ascending rates: lo the highest rate seen
    to pass before the first failure, hi that failure (0 or inf where the grid does not bracket it);
    the estimate interpolated in log-rate (nan where the grid does not bracket it)."""
    if shares[0] < target:
        return math.nan, 0.0, rates[0]
    for (r0, s0), (r1, s1) in zip(zip(rates, shares), zip(rates[1:], shares[1:])):
        if s1 < target:
            f = (s0 - target) / (s0 - s1)
            return math.exp(math.log(r0) + f * (math.log(r1) - math.log(r0))), r0, r1
    return math.nan, rates[-1], math.inf


def _order(found: tuple[float, float, float]) -> tuple[int, float]:
    """Sorts crossings: below the grid, then by estimate, then above it."""
    estimate, lo, hi = found
    return (0, hi) if lo == 0 else (2, lo) if math.isinf(hi) else (1, estimate)


def text(estimate: float, lo: float, hi: float) -> str:
    if lo == 0:
        return f"< {hi:.2f}"
    if math.isinf(hi):
        return f"> {lo:.2f}"
    return f"{estimate:.2f}"


def grid_capacity(requests: pd.DataFrame, slos: dict[str, dict[str, SloConfig]]) -> pd.DataFrame:
    """requests: grid_requests (load label, rate_per_s, budget, seed, status, ttft_s, tpot_s, itl_p99_s).
    One row per (slo, budget): the share within the SLO at each rate, the pooled capacity and its text,
    and the per-seed estimates' range."""
    rows = []
    rates = sorted(requests["rate_per_s"].unique())
    for name, by_factor in slos.items():
        slo = by_factor["1"]
        for budget, at in requests.groupby("budget"):
            met = at.assign(met=meets_slo_table(at, slo))
            pooled = met.groupby("rate_per_s")["met"].mean().reindex(rates)
            estimate, lo, hi = crossing(rates, list(pooled))
            per_seed = sorted((crossing(rates, list(g.groupby("rate_per_s")["met"].mean().reindex(rates)))
                               for _, g in met.groupby("seed")), key=_order)
            rows.append({"slo": name, "budget": int(budget), "capacity_req_per_s": estimate, "lo_req_per_s": lo,
                         "hi_req_per_s": hi, "capacity": text(estimate, lo, hi),
                         "seeds": f"{text(*per_seed[0])} to {text(*per_seed[-1])}",
                         **{f"share_at_{r:g}": s for r, s in pooled.items()}})
    return pd.DataFrame(rows)


def capacity_floor(cap: pd.DataFrame, simulated: pd.DataFrame) -> float | None:
    """The reference cell measured twice, on the same seeds and run length (the capacity stage's bisection,
    and the grid's crossing): |a - b| / max(a, b), a capacity's repeat floor on this machine. None where
    either is missing or the grid only bounds it."""
    if simulated.empty or "measured_req_per_s" not in simulated or cap.empty:
        return None
    ref = simulated.iloc[0]
    row = cap[(cap["budget"] == int(ref["budget"])) & (cap["slo"] == ref["slo"])]
    if row.empty or math.isnan(row.iloc[0]["capacity_req_per_s"]) or math.isnan(ref["measured_req_per_s"]):
        return None
    a, b = float(ref["measured_req_per_s"]), float(row.iloc[0]["capacity_req_per_s"])
    return abs(a - b) / max(a, b)


def past_top_note(cap: pd.DataFrame, top_rate: float, top_label: str) -> str:
    """Per SLO, whether the grid's top load is past capacity (share within the SLO under the target) at
    every budget: where it is not, the grid bounds capacity from below only."""
    parts = []
    for slo, g in cap.groupby("slo", sort=False):
        under = g[g[f"share_at_{top_rate:g}"] < TARGET]["budget"].tolist()
        where = ("every budget" if len(under) == len(g) else "no budget" if not under
                 else f"budgets {', '.join(map(str, under))} only")
        parts.append(f"`{slo}` at {where}")
    return f"Past capacity at the top load ({top_label}, under {TARGET:.0%} within the SLO): {'; '.join(parts)}."


def steady_note(simulated: pd.DataFrame) -> str:
    """How far the run length is from steady state, on the profile: capacity at steady_requests against
    the grid's length, and whether the budgets rank the same at both under each SLO."""
    ratio = simulated["sim_steady_req_per_s"] / simulated["simulated_req_per_s"]
    same = []
    for slo, g in simulated.groupby("slo", sort=False):
        short = list(g.sort_values("simulated_req_per_s")["budget"])
        steady = list(g.sort_values("sim_steady_req_per_s")["budget"])
        same.append(f"`{slo}` {'the same' if short == steady else 'differently'}")
    steady = int(simulated["sim_steady_requests"].iloc[0])
    return (f"Steady state (SIMULATED, this machine's profile): runs of {steady:,} requests reach {ratio.min():.0%} to "
            f"{ratio.max():.0%} of the capacity that runs of the grid's length reach (short runs end before the queue "
            f"builds), and rank the budgets {', '.join(same)}. The capacities here overstate steady state by about "
            "that much; where the ranking is the same, a comparison between budgets stands at steady state too.")


def capacity_section(cap: pd.DataFrame, simulated: pd.DataFrame, loads: dict[float, str]) -> list[str]:
    """The table (at most 8 columns) and its note. simulated: the capacity stage's cells (budget, slo,
    simulated_req_per_s: the same definition on the profile); loads: rate -> its load label."""
    if cap.empty:
        return []
    sim = {(int(r.budget), r.slo): r.simulated_req_per_s for r in simulated.itertuples()} if not simulated.empty else {}
    table = pd.DataFrame({"SLO": [f"`{s}`" for s in cap["slo"]], "budget": cap["budget"]})
    for rate, label in sorted(loads.items()):
        table[f"within SLO at {label.split(' (')[0]}"] = [f"{100 * v:.0f}%" for v in cap[f"share_at_{rate:g}"]]
    table["capacity (req/s)"] = cap["capacity"]
    table["per seed (req/s)"] = cap["seeds"]
    table["simulated (req/s)"] = [f"{sim[(b, s)]:.2f}" if (b, s) in sim else "-" for b, s in zip(cap["budget"], cap["slo"])]
    note = [past_top_note(cap, max(loads), loads[max(loads)].split(' (')[0])]
    if not simulated.empty and "measured_req_per_s" in simulated:
        ref = simulated.iloc[0]
        row = cap[(cap["budget"] == int(ref["budget"])) & (cap["slo"] == ref["slo"])]
        if not row.empty:
            r = row.iloc[0]
            note.append(f"The reference cell (budget {int(ref['budget'])}, `{ref['slo']}`) two ways on the same seeds and "
                    f"run length: {ref['measured_req_per_s']:.2f} req/s by the capacity stage's bisection (the base of "
                    f"every load), {r['capacity']} req/s interpolated here, whose seeds alone span {r['seeds']} req/s; "
                    "the two sets of runs differ by the machine's drift between them.")
            floor = capacity_floor(cap, simulated)
            if floor is not None:
                note[-1] += (f" They differ by {floor:.0%}: one pair, the only repeat of a capacity in this repro, "
                             "so a difference between budgets' capacities is read beside it and decided by the paired "
                             "verdicts on each request.")
    if not simulated.empty and "sim_steady_requests" in simulated:
        note.append(steady_note(simulated))
    return [HEADING,
            f"MEASURED. The share of requests within each SLO at each load of the grid (every seed pooled), and "
            f"capacity: where that share crosses {TARGET:.0%}, interpolated in log-rate between the loads that bracket "
            "it (a bound where the grid does not); seeds: the same per seed, lowest to highest. Simulated: the "
            "capacity stage's bisection of the same definition on this machine's profile.",
            table.to_markdown(index=False), *note]
