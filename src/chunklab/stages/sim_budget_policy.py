"""Stage sim_budget_policy (simulated): the token budget as a dial, against budget policies that set
it each step (engine/policies/: slo_adaptive solves each step's chunk from the SLO and the cost
model; load_adaptive switches between two budgets on queue pressure, the P-PAS rule).

A point is a (workload, SLO family). At each point, per arm (every fixed budget, every policy) and
seed: the capacity of that seed's requests alone (the capacity stage's definition and run length:
the highest rate with >= target of them in SLO). The best fixed budget is the one with the highest
median capacity; every arm is set against it by the report's paired rule (metrics/paired.py, seeds
as the units): an arm "ties or wins" there unless the interval puts it lower.

Then at `load` x the best fixed budget's median capacity, every arm serves each seed's requests
once more, and two costs are read against the best fixed budget, paired by request: the worst stall
(the largest gap any request saw) and the long prompts' own TTFT p50 (what chunking costs the
chunked request).

The verdict (issue 63's): "an SLO-aware budget removes the dial" holds when slo_adaptive ties or
wins at every point and at more points than any single fixed budget; else it does not, naming the
points where it loses.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.experiments.capacity import at_rate, search
from chunklab.experiments.compose import compose_run_config, simulated_conditions
from chunklab.experiments.simulate import requests_of, simulate, simulate_many
from chunklab.metrics.paired import FAILS, HOLDS, interval, of_values
from chunklab.stages.common import arguments, read_section, write_json, write_text
from chunklab.stages.typed_yaml import Section


@Section
class SimBudgetPolicyParams:
    workloads: list[str]
    budgets: list[int]  # the fixed arms
    policies: list[str]  # scheduler config files (conf/scheduler/) of the adaptive arms
    slos: list[str]
    num_requests: int
    seeds: list[int]
    target: float
    rel_tol: float
    load: float  # the cost runs' rate: this fraction of the best fixed budget's median capacity
    processes: int
    overrides: list[str]


DECIDING = "slo_adaptive"  # the policy the verdict is about
TIES, LOSES, WINS = "ties", "loses", "wins"
RECORD_KEYS = ("request_id", "label", "ttft_s", "max_gap_s")


def arms(p: SimBudgetPolicyParams) -> list[tuple[str, list[str]]]:
    """(arm, scheduler overrides): the fixed budgets, then the policies."""
    return ([(f"budget {b}", [f"scheduler.budget={b}"]) for b in p.budgets]
            + [(policy, [f"scheduler={policy}"]) for policy in p.policies])


def config(p: SimBudgetPolicyParams, profile: Path, workload: str, slo: str, overrides: list[str]):
    return compose_run_config(["engine=simulated", "tracking=none", "slowdown=false", f"workload={workload}",
                               f"engine.profile={profile}", f"slo={slo}", f"workload.num_requests={p.num_requests}",
                               *overrides, *p.overrides])


def cell_capacity(job: tuple) -> dict:
    """One (workload, slo, arm, seed): its simulated capacity (a worker of simulate_many)."""
    key, cfg, target, rel_tol = job
    found = search(cfg, [key["seed"]], target, rel_tol, processes=1, start=(1.0, 16.0))
    return key | {"capacity_req_per_s": found.lo_req_per_s}


def cell_records(job: tuple) -> list[dict]:
    """One (workload, slo, arm, seed) at a rate: each request's RECORD_KEYS (a worker of simulate_many)."""
    key, cfg = job
    _, records = simulate(cfg, partial(requests_of, keys=RECORD_KEYS))
    return [key | r for r in records]


def capacities(p: SimBudgetPolicyParams, profile: Path) -> pd.DataFrame:
    jobs = []
    for workload in p.workloads:
        for slo in p.slos:
            for arm, overrides in arms(p):
                cfg = config(p, profile, workload, slo, overrides)
                jobs += [({"workload": workload, "slo": slo, "arm": arm, "seed": seed}, cfg, p.target, p.rel_tol)
                         for seed in p.seeds]
    return pd.DataFrame(simulate_many(jobs, p.processes, fn=cell_capacity, label="sim_budget_policy capacity"))


def best_fixed(caps: pd.DataFrame) -> pd.DataFrame:
    """Per point: the fixed budget with the highest median capacity over seeds, and that median."""
    fixed = caps[caps["arm"].str.startswith("budget ")]
    med = fixed.groupby(["workload", "slo", "arm"], sort=False)["capacity_req_per_s"].median().reset_index()
    top = med.loc[med.groupby(["workload", "slo"], sort=False)["capacity_req_per_s"].idxmax()]
    return top.rename(columns={"arm": "best_fixed", "capacity_req_per_s": "best_fixed_req_per_s"})


def standing(caps: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Per point and arm: its median capacity and the paired change against the point's best fixed
    budget; ties or wins unless the interval puts it lower (wins: higher)."""
    rows = []
    for b in best.itertuples():
        at = caps[(caps["workload"] == b.workload) & (caps["slo"] == b.slo)]
        by = at.pivot(index="seed", columns="arm", values="capacity_req_per_s").sort_index()
        for arm in at["arm"].unique():
            iv = interval(of_values(by[b.best_fixed].to_numpy(), np.median), of_values(by[arm].to_numpy(), np.median),
                          by.index.to_numpy())
            verdict = iv.verdict("higher")
            rows.append({"workload": b.workload, "slo": b.slo, "arm": arm, "capacity_req_per_s": iv.b,
                         "best_fixed": b.best_fixed, "best_fixed_req_per_s": iv.a,
                         "vs_best_fixed": iv.text() if arm != b.best_fixed else "",
                         "standing": WINS if verdict == HOLDS else LOSES if verdict == FAILS else TIES})
    return pd.DataFrame(rows)


def cost_runs(p: SimBudgetPolicyParams, profile: Path, best: pd.DataFrame) -> pd.DataFrame:
    """Every arm's requests on every seed at `load` x the point's best fixed capacity."""
    jobs = []
    for b in best.itertuples():
        rate = p.load * b.best_fixed_req_per_s
        for arm, overrides in arms(p):
            cfg = config(p, profile, b.workload, b.slo, overrides)
            jobs += [({"workload": b.workload, "slo": b.slo, "arm": arm, "seed": seed, "rate_per_s": rate},
                      at_rate(cfg, rate, seed)) for seed in p.seeds]
    done = simulate_many(jobs, p.processes, fn=cell_records, label="sim_budget_policy costs")
    return pd.DataFrame([r for records in done for r in records])


def costs(runs: pd.DataFrame, best: pd.DataFrame, policies: list[str]) -> pd.DataFrame:
    """Per point, for each policy, the best fixed budget and the smallest: worst stall and long-prompt
    TTFT p50 against the best fixed budget's, paired by request (seeds the clusters)."""
    rows = []
    smallest = min((a for a in runs["arm"].unique() if a.startswith("budget ")), key=lambda a: int(a.split()[1]))
    for b in best.itertuples():
        at = runs[(runs["workload"] == b.workload) & (runs["slo"] == b.slo)]
        for arm in dict.fromkeys([*policies, b.best_fixed, smallest]):
            base = at[at["arm"] == b.best_fixed].sort_values(["seed", "request_id"])
            mine = at[at["arm"] == arm].sort_values(["seed", "request_id"])
            row = {"workload": b.workload, "slo": b.slo, "arm": arm, "rate_per_s": float(mine["rate_per_s"].iloc[0])}
            stall = interval(of_values(base["max_gap_s"].fillna(0).to_numpy(), np.max),
                             of_values(mine["max_gap_s"].fillna(0).to_numpy(), np.max), base["seed"].to_numpy())
            long_base, long_mine = base[base["label"] == "long"], mine[mine["label"] == "long"]
            ttft = interval(of_values(long_base["ttft_s"].to_numpy(), np.median),
                            of_values(long_mine["ttft_s"].to_numpy(), np.median), long_base["seed"].to_numpy())
            rows.append(row | {"worst_stall_s": stall.b, "best_fixed_worst_stall_s": stall.a,
                               "worst_stall_change": stall.text() if arm != b.best_fixed else "",
                               "long_ttft_p50_s": ttft.b, "best_fixed_long_ttft_p50_s": ttft.a,
                               "long_ttft_change": ttft.text() if arm != b.best_fixed else ""})
    return pd.DataFrame(rows)


def verdict(stand: pd.DataFrame) -> dict:
    """Issue 63's rule on the standings: DECIDING ties or wins at every point, and at more points than
    any single fixed budget."""
    ok = stand["standing"] != LOSES
    counts = stand[ok].groupby("arm").size().reindex(stand["arm"].unique(), fill_value=0)
    fixed = counts[[a for a in counts.index if a.startswith("budget ")]]
    points = stand[["workload", "slo"]].drop_duplicates().shape[0]
    mine = int(counts.get(DECIDING, 0))
    lost = stand[(stand["arm"] == DECIDING) & ~ok]
    holds = mine == points and mine > int(fixed.max())
    return {"holds": bool(holds), "points": points, "ties_or_wins": {a: int(n) for a, n in counts.items()},
            "loses_at": [f"{r.workload} under {r.slo}" for r in lost.itertuples()]}


def metric_key(arm: str) -> str:
    """An arm as a metrics key (no spaces): "budget 64" -> "b64"; a policy by its name."""
    return arm.replace("budget ", "b")


def verdict_text(v: dict) -> str:
    counts = ", ".join(f"{arm} {n}" for arm, n in v["ties_or_wins"].items())
    best_fixed = max((n for a, n in v["ties_or_wins"].items() if a.startswith("budget ")), default=0)
    if v["holds"]:
        why = f"it ties or wins at all {v['points']} points, a fixed budget at {best_fixed} at most"
    elif v["loses_at"]:
        why = f"it loses at {', '.join(v['loses_at'])}"
    else:
        why = f"it ties or wins at every point, but so does a fixed budget ({best_fixed} of {v['points']})"
    return (f"**An SLO-aware budget removes the dial: {'holds' if v['holds'] else 'does not hold'}** ({why}; points "
            f"where each arm ties or wins, of {v['points']}: {counts}).")


def run(p: SimBudgetPolicyParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (capacity.csv, standing.csv, costs.csv, metrics.json) and the table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    caps = capacities(p, profile)
    caps.to_csv(out_dir / "capacity.csv", index=False, float_format="%.5g")
    best = best_fixed(caps)
    stand = standing(caps, best)
    stand.to_csv(out_dir / "standing.csv", index=False, float_format="%.5g")
    cost = costs(cost_runs(p, profile, best), best, p.policies)
    cost.to_csv(out_dir / "costs.csv", index=False, float_format="%.5g")
    v = verdict(stand)
    capacity: dict = {}  # dvc metrics show: sim_budget_policy.capacity.<workload>.<slo>.<b64 | policy> (req/s)
    for r in stand.itertuples():
        capacity.setdefault(r.workload, {}).setdefault(r.slo, {})[metric_key(r.arm)] = round(float(r.capacity_req_per_s), 4)
    write_json(out_dir / "metrics.json", {"sim_budget_policy": {
        "removes_the_dial": int(v["holds"]), "ties_or_wins": {metric_key(a): n for a, n in v["ties_or_wins"].items()},
        "capacity": capacity}})
    table = pd.DataFrame({
        "workload": stand["workload"], "SLO": [f"`{s}`" for s in stand["slo"]], "arm": stand["arm"],
        "capacity (req/s)": stand["capacity_req_per_s"].map("{:.2f}".format),
        "vs best fixed [95% CI]": [f"{c} ({b})" if c else "best fixed" for c, b in zip(stand["vs_best_fixed"],
                                                                                     stand["best_fixed"])],
        "standing": stand["standing"]})
    cost_table = pd.DataFrame({
        "workload": cost["workload"], "SLO": [f"`{s}`" for s in cost["slo"]], "arm": cost["arm"],
        "rate (req/s)": cost["rate_per_s"].map("{:.2f}".format),
        "worst stall (ms)": (1e3 * cost["worst_stall_s"]).map("{:.1f}".format),
        "vs best fixed": cost["worst_stall_change"],
        "long-prompt TTFT p50 (ms)": (1e3 * cost["long_ttft_p50_s"]).map("{:.1f}".format),
        "vs best fixed ": cost["long_ttft_change"]})
    write_text(table_path, "\n\n".join([
        "### Budget policies against every fixed budget (simulated)",
        f"SIMULATED with this machine's profile. Arms: fixed budgets {', '.join(map(str, p.budgets))} and the "
        f"policies {', '.join(p.policies)} (conf/scheduler/). Capacity as the capacity stage defines it "
        f"({p.target:.0%} of {p.num_requests} requests within the SLO) per seed ({', '.join(map(str, p.seeds))}), "
        "the median over seeds printed; each arm against the point's best fixed budget by the report's paired rule, "
        "seeds as the units (ties: the interval holds zero or the change is under 2%).",
        table.to_markdown(index=False),
        verdict_text(v),
        f"What each policy costs, at {p.load:g}x the best fixed budget's capacity (the policies, the best fixed budget "
        "and the smallest on the same requests; paired by request, seeds as clusters): the worst stall any request "
        "saw and the long prompts' own TTFT p50.",
        cost_table.to_markdown(index=False),
        f"Conditions: {simulated_conditions([f'engine.profile={profile}', *p.overrides])}", ""]))
    print(table.to_string(index=False))
    print(verdict_text(v))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_budget_policy --params params.yaml --profile outputs/profiles/machine.json
        --out outputs/simulated/budget_policy --table outputs/simulated/tables/budget_policy.md
    """
    args = arguments(__doc__, "params", "profile", "out", "table", argv=argv)
    run(read_section(args.params, "sim_budget_policy", SimBudgetPolicyParams), profile=args.profile,
        out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
