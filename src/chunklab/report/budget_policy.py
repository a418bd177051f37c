"""REPORT.md's budget-policy section: a budget policy measured on the load grid's requests
(stages/budget_policy.py) against the grid's fixed budgets (the fidelity stage's runs of the same
requests), scored here as the grid is; the simulated comparison over workloads and SLO families
(stages/sim_budget_policy.py) with the verdict "an SLO-aware budget removes the dial"; the summary line.

The measured comparison, per SLO family the policy ran under:
- capacity on the grid: where the share of requests within the SLO, pooled over the seeds, crosses
  90%, interpolated in log-rate between the loads that bracket it (report/capacity.py's rule);
- at each rate, the policy against each fixed budget by the report's paired rule (metrics/paired.py;
  requests paired by seed and id, seeds the clusters): share within the SLO, worst stall (the
  largest gap any request saw, and the largest the machine did not stretch: metrics/stalls.py), the
  long prompts' TTFT p50.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.metrics.paired import FAILS, HOLDS, interval, of_values
from chunklab.metrics.summary import NOISY_STEP_FACTOR, meets_slo_table
from chunklab.report.capacity import crossing, text
from chunklab.report.claim_text import scored_slos

COLUMNS = ["arm", "seed", "rate_per_s", "request_id", "label", "status", "output_tokens", "ttft_s", "tpot_s",
           "itl_p99_s", "max_gap_s", "max_clean_gap_s", "num_noisy_gaps"]
MAX_NOISY_GAP_SHARE = 0.05  # an arm whose guard left out more of its gaps at a rate is the machine's there: no clean stall

HEADING = "## The dial without a dial: budget policies (measured, and simulated)"  # this section's: the summary links it


def fixed_arms(fidelity_requests: Path, workload: str, seeds, rates) -> pd.DataFrame:
    """The fidelity grid's measured requests of `workload`, first repeat, at these seeds and rates: one
    arm per budget ("budget 512")."""
    req = with_clean_column(pd.read_csv(fidelity_requests))
    req = req[(req["repeat"] == 0) & req["point"].str.match(rf"^{workload} b\d+ load [\d.]+( seed \d+)?$")
              & req["seed"].isin(seeds) & req["rate_per_s"].isin(rates)]
    return req.assign(arm=[f"budget {int(b)}" for b in req["budget"]])[COLUMNS]


def with_clean_column(requests: pd.DataFrame) -> pd.DataFrame:
    """requests with max_clean_gap_s and num_noisy_gaps (NaN where its run was not judged: one measured
    before the guard)."""
    return requests.assign(**{c: float("nan") for c in ("max_clean_gap_s", "num_noisy_gaps") if c not in requests})


def judged(arm: pd.DataFrame) -> bool:
    """The guard judged every finished request with a gap (metrics/stalls.py), and left out at most
    MAX_NOISY_GAP_SHARE of the arm's gaps: beyond that a run drifted from its profile as a whole, and
    the 2x rule would be reading the drift."""
    if not (arm["num_noisy_gaps"].notna() | arm["max_gap_s"].isna()).all():
        return False
    gaps = (arm["output_tokens"][arm["max_gap_s"].notna()] - 1).sum()
    return bool(gaps > 0 and arm["num_noisy_gaps"].sum() / gaps <= MAX_NOISY_GAP_SHARE)


def worst(column: pd.Series) -> np.ndarray:
    return column.fillna(0).to_numpy()


def compare(arms: pd.DataFrame, slo_name: str, slo, policy: str) -> tuple[list[dict], list[dict]]:
    """(capacity rows, per-load rows) for one SLO family: arms holds every fixed budget's requests and
    the policy's runs under this family."""
    arms = with_clean_column(arms).assign(met=meets_slo_table(arms, slo))
    rates = sorted(arms["rate_per_s"].unique())
    caps = []
    for arm, at in arms.groupby("arm", sort=False):
        pooled = at.groupby("rate_per_s")["met"].mean().reindex(rates)
        estimate, lo, hi = crossing(rates, list(pooled))
        caps.append({"slo": slo_name, "arm": arm, "capacity_req_per_s": estimate, "lo_req_per_s": lo, "hi_req_per_s": hi,
                     "capacity": text(estimate, lo, hi),
                     **{f"share_at_{r:g}": s for r, s in pooled.items()}})
    loads = []
    for rate in rates:
        at = arms[arms["rate_per_s"] == rate].sort_values(["seed", "request_id"])
        mine = at[at["arm"] == policy]
        for arm in [a for a in at["arm"].unique() if a != policy]:
            base = at[at["arm"] == arm]
            if len(base) != len(mine) or not (base["request_id"].to_numpy() == mine["request_id"].to_numpy()).all():
                raise SystemExit(f"budget_policy: {arm} and {policy} at {rate} req/s did not serve the same requests")
            seeds = base["seed"].to_numpy()
            share = interval(of_values(base["met"].to_numpy(), np.mean), of_values(mine["met"].to_numpy(), np.mean), seeds)
            stall = interval(of_values(worst(base["max_gap_s"]), np.max), of_values(worst(mine["max_gap_s"]), np.max), seeds)
            clean = (interval(of_values(worst(base["max_clean_gap_s"]), np.max),
                              of_values(worst(mine["max_clean_gap_s"]), np.max), seeds)
                     if judged(base) and judged(mine) else None)  # None: a run measured before the guard
            lb, lm = base[base["label"] == "long"], mine[mine["label"] == "long"]
            ttft = interval(of_values(lb["ttft_s"].to_numpy(), np.median), of_values(lm["ttft_s"].to_numpy(), np.median),
                            lb["seed"].to_numpy())
            verdict = share.verdict("higher")
            loads.append({"slo": slo_name, "rate_per_s": rate, "against": arm,
                          "share_fixed": share.a, "share_policy": share.b, "share_change": share.text(),
                          "standing": "wins" if verdict == HOLDS else "loses" if verdict == FAILS else "ties",
                          "worst_stall_fixed_s": stall.a, "worst_stall_policy_s": stall.b,
                          "worst_stall_change": stall.text(),
                          "clean_stall_fixed_s": clean.a if clean else float("nan"),
                          "clean_stall_policy_s": clean.b if clean else float("nan"),
                          "clean_stall_change": clean.text() if clean else "",
                          "long_ttft_p50_fixed_s": ttft.a, "long_ttft_p50_policy_s": ttft.b,
                          "long_ttft_change": ttft.text()})
    return caps, loads


def failures(arms: pd.DataFrame, slo_name: str, slo) -> dict:
    """Per arm, of its requests under this SLO family (every rate pooled): the share over the TTFT bound
    and the share over the gap bound (mean gap or p99 gap, the one the family sets)."""
    gap_column, gap_limit = ("itl_p99_s", slo.itl_p99_s) if slo.itl_p99_s is not None else ("tpot_s", slo.tpot_s)
    out = {}
    for arm, at in arms.groupby("arm", sort=False):
        ttft, gap = at["ttft_s"].to_numpy(dtype=float), at[gap_column].to_numpy(dtype=float)
        out[arm] = {"slo": slo_name, "ttft": float(np.mean(ttft > slo.ttft_s)) if slo.ttft_s is not None else 0.0,
                    "gap": float(np.mean(gap > gap_limit)) if gap_limit is not None else 0.0,
                    "gap_name": "p99 gap" if gap_column == "itl_p99_s" else "mean gap"}
    return out


def why_text(policy: str, fails: list[dict], runs: pd.DataFrame | None) -> str:
    """Which bound each arm's requests broke, and how far the policy's steps ran from the profile."""
    lines = []
    for by_arm in fails:
        any_arm = next(iter(by_arm.values()))
        parts = "; ".join(f"{arm} {100 * f['ttft']:.1f}% / {100 * f['gap']:.1f}%" for arm, f in by_arm.items())
        lines.append(f"- Under `{any_arm['slo']}`, requests over the TTFT bound / over the {any_arm['gap_name']} "
                     f"bound, all rates pooled: {parts}.")
    if runs is not None and "step_time_vs_predicted_p50" in runs:
        for slo, r in runs.groupby("slo", sort=False):
            x = r["step_time_vs_predicted_p50"].dropna()
            if len(x):
                lines.append(f"- The `{policy}` runs under `{slo}`: the median step ran {x.min():.2f}-{x.max():.2f}x the "
                             "profile's prediction (per run), the drift the policy corrects for on the steps it cuts.")
    return "\n".join(lines)


def markdown(policy: str, mine: pd.DataFrame, caps: pd.DataFrame, loads: pd.DataFrame, conditions: str,
             why: str = "") -> str:
    cap_table = caps[["slo", "arm", "capacity", *[c for c in caps.columns if c.startswith("share_at_")]]].copy()  # no lo/hi
    for c in [c for c in cap_table.columns if c.startswith("share_at_")]:
        cap_table[c] = (100 * cap_table[c]).map("{:.0f}%".format)
    cap_table = cap_table.rename(columns={c: f"in SLO at {c[len('share_at_'):]} req/s" for c in cap_table.columns
                                          if c.startswith("share_at_")} | {"capacity": "capacity (req/s)"})
    load_table = pd.DataFrame({
        "SLO": [f"`{s}`" for s in loads["slo"]], "rate (req/s)": loads["rate_per_s"].map("{:.2f}".format),
        "against": loads["against"],
        "in SLO: fixed -> policy": [f"{100 * a:.0f}% -> {100 * b:.0f}%" for a, b in zip(loads["share_fixed"],
                                                                                     loads["share_policy"])],
        "change [95% CI]: policy": [f"{c}: {w}" for c, w in zip(loads["share_change"], loads["standing"])],
        "worst stall (ms)": [f"{1e3 * a:.1f} -> {1e3 * b:.1f}" for a, b in zip(loads["worst_stall_fixed_s"],
                                                                              loads["worst_stall_policy_s"])],
        "not stretched by the machine (ms)": ["not judged" if np.isnan(a) else f"{1e3 * a:.1f} -> {1e3 * b:.1f}"
                                              for a, b in zip(loads["clean_stall_fixed_s"], loads["clean_stall_policy_s"])],
        "long TTFT p50 (ms), change": [f"{1e3 * a:.0f} -> {1e3 * b:.0f}, {c}" for a, b, c in zip(
            loads["long_ttft_p50_fixed_s"], loads["long_ttft_p50_policy_s"], loads["long_ttft_change"])]})
    return "\n\n".join([
        f"### The {policy} budget on this machine (measured)",
        f"MEASURED. The `{policy}` budget policy (conf/scheduler/{policy}.yaml) on the fidelity grid's requests "
        f"({mine['workload'].iloc[0]}, {int(mine['num_requests'].iloc[0])} requests, seeds "
        f"{', '.join(map(str, sorted(mine['seed'].unique())))}, at {', '.join(f'{r:.2f}' for r in sorted(mine['rate_per_s'].unique()))} "
        "req/s), run once under each SLO family (its gap target is that SLO's), against the grid's fixed-budget runs "
        "of the same requests, each scored under that family. Capacity: where the share within the SLO, pooled over "
        "the seeds, crosses 90%, interpolated in log-rate between the rates that bracket it.",
        cap_table.to_markdown(index=False),
        goals(policy, caps, loads),
        *([why] if why else []),
        "At each rate, the policy against each fixed budget by the report's paired rule (requests paired by seed and "
        "id, seeds the clusters; the change is the policy's against the fixed budget's): share within the SLO, the "
        "worst stall any request saw (and the worst one the machine did not stretch: a gap that ran more than "
        f"{NOISY_STEP_FACTOR:g}x the profile's prediction of its steps is the VM's, not the schedule's; not judged "
        f"where the guard left out more than {MAX_NOISY_GAP_SHARE:.0%} of an arm's gaps), and the long prompts' own "
        "TTFT p50.",
        load_table.to_markdown(index=False), f"Conditions (first run): {conditions}", ""])


def rank(row) -> tuple[int, float]:
    """Orders capacities on the grid: below its lowest rate, then by estimate, then above its highest."""
    return ((0, row.hi_req_per_s) if row.lo_req_per_s == 0 else (2, row.lo_req_per_s)
            if row.hi_req_per_s == float("inf") else (1, row.capacity_req_per_s))


def goals(policy: str, caps: pd.DataFrame, loads: pd.DataFrame) -> str:
    """Issue 63's measured goals, per SLO family, from the data: the policy's capacity against the best
    fixed budget's; how it stands against every fixed budget at every rate (paired share within the
    SLO); its worst stall against budget 64's at each rate (goal: within 2x), of the gaps the machine did
    not stretch where the runs were judged (metrics/stalls.py), and of every gap."""
    lines = []
    for slo, g in caps.groupby("slo", sort=False):
        fixed = [r for r in g.itertuples() if r.arm != policy]
        best = max(fixed, key=rank)
        mine = next(r for r in g.itertuples() if r.arm == policy)
        at = loads[loads["slo"] == slo]
        standings = at["standing"].value_counts()
        small = at[at["against"] == "budget 64"]
        stall = (small["worst_stall_policy_s"] / small["worst_stall_fixed_s"]).max() if not small.empty else float("nan")
        judged_everywhere = not small.empty and bool((small["clean_stall_fixed_s"] > 0).all()
                                                     and small["clean_stall_policy_s"].notna().all())
        clean = (small["clean_stall_policy_s"] / small["clean_stall_fixed_s"]).max() if judged_everywhere else float("nan")
        stalls = (f"worst stall at most {stall:.2f}x budget 64's at the same rate (goal: within 2x)" if np.isnan(clean)
                  else f"worst stall the machine did not stretch at most {clean:.2f}x budget 64's at the same rate "
                       f"(goal: within 2x; **{'met' if clean <= 2 else 'missed'}**), {stall:.2f}x counting every gap")
        verdict = "at least" if rank(mine) >= rank(best) else "below"
        lines.append(f"- Under `{slo}`: capacity {mine.capacity} against the best fixed budget's ({best.arm}) "
                     f"{best.capacity} req/s, **{verdict}** it; against every fixed budget at every rate (share within "
                     f"the SLO, paired): {', '.join(f'{k} {n}' for k, n in standings.items())}; {stalls}.")
    return "\n".join(lines)


def measured_comparison(outputs: Path) -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame, str] | None:
    """(policy, its requests, capacity rows, per-load rows, why: which bounds failed) of stage budget_policy against the grid's
    fixed budgets, each SLO family it ran under; None where it has not run. Computed once per report
    (the section and the summary read it; its bootstraps take seconds)."""
    path = outputs / "budget_policy" / "requests.csv"
    if not path.is_file():
        return None
    return _measured_comparison(outputs, path.stat().st_mtime)


@functools.lru_cache(maxsize=2)
def _measured_comparison(outputs: Path, _stamp: float) -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame, str]:
    path = outputs / "budget_policy" / "requests.csv"
    mine = pd.read_csv(path)
    policy = mine["arm"].iloc[0]
    fixed = fixed_arms(outputs / "fidelity" / "requests_measured.csv", mine["workload"].iloc[0],
                       mine["seed"].unique(), mine["rate_per_s"].unique())
    slos = scored_slos(outputs)
    caps, loads, fails = [], [], []
    for name, g in mine.groupby("slo", sort=False):
        arms = pd.concat([fixed, with_clean_column(g)[COLUMNS]])
        c, l = compare(arms, name, slos[name]["1"], policy)
        caps += c
        loads += l
        fails.append(failures(arms, name, slos[name]["1"]))
    runs_path = outputs / "budget_policy" / "runs.csv"
    why = why_text(policy, fails, pd.read_csv(runs_path) if runs_path.is_file() else None)
    return policy, mine, pd.DataFrame(caps), pd.DataFrame(loads), why


def measured_table(outputs: Path) -> str:
    """The measured comparison's markdown ("" where stage budget_policy has not run)."""
    found = measured_comparison(outputs)
    if found is None:
        return ""
    conditions = json.loads((outputs / "budget_policy" / "conditions.json").read_text())["measured"]
    policy, mine, caps, loads, why = found
    return markdown(policy, mine, caps, loads, conditions, why)


def budget_policy_section(outputs: Path) -> list[str]:
    """The measured comparison (stages/budget_policy.py) where it ran, then the simulated one."""
    simulated = [outputs / "simulated" / "tables" / f"{name}.md" for name in ("budget_policy", "policy_production")]
    parts = [part for part in (measured_table(outputs), *(t.read_text() for t in simulated if t.is_file())) if part]
    if not parts:
        return []
    return [HEADING, *parts]


def why_not(m: dict, points: int) -> str:
    """Why the rule does not hold (sim_budget_policy's metrics): the points the policy loses, or the fixed
    budgets that tie or win as often as it does."""
    counts = m["ties_or_wins"]
    if counts.get("slo_adaptive", 0) < points:
        return f" (it ties or wins at {counts.get('slo_adaptive', 0)} of {points} points)"
    level = [k.replace("b", "budget ", 1) for k, n in counts.items() if k.startswith("b") and n >= counts["slo_adaptive"]]
    return f" (it ties or wins at all {points} points, and so does {' and '.join(level)})"


def budget_policy_summary(outputs: Path, link: str) -> list[str]:
    """One line: the verdict, and per point the best fixed budget against the SLO-aware policy."""
    metrics, standing = (outputs / "simulated" / "budget_policy" / name for name in ("metrics.json", "standing.csv"))
    if not metrics.is_file() or not standing.is_file():
        return []
    m = json.loads(metrics.read_text())["sim_budget_policy"]
    s = pd.read_csv(standing)
    mine = s[s["arm"] == "slo_adaptive"]
    points = "; ".join(f"{r.workload} under `{r.slo}` {r.capacity_req_per_s:.2f} against {r.best_fixed} "
                       f"{r.best_fixed_req_per_s:.2f} req/s ({r.standing})" for r in mine.itertuples())
    measured = measured_comparison(outputs)
    lines = []
    if measured is not None:
        policy, _, caps, _, _ = measured
        per_slo = []
        for slo, g in caps.groupby("slo", sort=False):
            arms = "; ".join(f"{r.arm} {r.capacity}" for r in g.itertuples())
            per_slo.append(f"under `{slo}` {arms}")
        lines.append(f"- The `{policy}` budget measured on the load grid's requests, capacity (req/s, where 90% in SLO "
                     f"is crossed): {'; '.join(per_slo)} ([budget policies]({link})).")
    lines.append(f"- An SLO-aware budget (simulated capacity, paired over seeds): "
                 f"{'removes the dial' if m['removes_the_dial'] else 'does not remove the dial'}"
                 f"{'' if m['removes_the_dial'] else why_not(m, len(mine))}: {points} ([budget policies]({link})).")
    production = outputs / "simulated" / "policy_production" / "metrics.json"
    if production.is_file():
        q = json.loads(production.read_text())["sim_policy_production"]
        lines.append(f"- At production scale (simulated, GPU presets): slo_adaptive within 2% of the best fixed budget's "
                     f"capacity at {q['slo_adaptive_share_within_tie']:.0%} of the points, "
                     f"{'more' if q['more_than_any_fixed'] else 'not more'} than any single fixed budget "
                     f"([budget policies]({link})).")
    return lines
