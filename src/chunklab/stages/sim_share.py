"""Stage sim_share (simulated): the chapter's thesis as an axis. Chunking pays when prefills are
occasional and loses when one is nearly always in flight: vary how often a long prompt arrives (the
ch10 mix with its long-prompt share set to each of `shares`) and find which budget serves the
highest rate within each SLO.

Per (share, SLO, budget, seed): the capacity of that seed's requests alone (the capacity stage's
definition and run length), simulated with this machine's profile. Per (share, SLO): the smallest
budget against the largest by the report's one paired rule (metrics/paired.py; the seeds are the
units, paired: the same arrivals at every budget), and the budget with the highest median capacity.
The crossover share: the smallest share at which a small budget stops helping.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.experiments.capacity import search
from chunklab.experiments.compose import compose_run_config, simulated_conditions
from chunklab.experiments.simulate import simulate_many
from chunklab.metrics.paired import FAILS, HOLDS, interval, of_values
from chunklab.stages.common import arguments, read_section, write_json, write_text
from chunklab.stages.typed_yaml import Section


@Section
class SimShareParams:
    workload: str
    long_class: int  # index of the long-prompt class in the workload's classes
    shares: list[float]
    budgets: list[int]
    slos: list[str]
    num_requests: int
    seeds: list[int]
    target: float
    rel_tol: float
    processes: int
    overrides: list[str]


HELPS, HURTS = "helps", "hurts"


def mix(p: SimShareParams, share: float) -> list[str]:
    """The workload with its long-prompt class at `share` of the requests, the rest short."""
    short = 1 - p.long_class  # the two-class mix: the other class
    return [f"workload.classes.{p.long_class}.weight={share}", f"workload.classes.{short}.weight={1 - share}"]


def cell_capacity(job: tuple) -> dict:
    """One (share, slo, budget, seed): its simulated capacity (a worker of simulate_many)."""
    key, cfg, target, rel_tol = job
    found = search(cfg, [key["seed"]], target, rel_tol, processes=1, start=(1.0, 16.0))
    return key | {"capacity_req_per_s": found.lo_req_per_s}


def jobs(p: SimShareParams, profile: Path) -> list[tuple]:
    out = []
    for share in p.shares:
        for slo in p.slos:
            for budget in p.budgets:
                cfg = compose_run_config(["engine=simulated", "tracking=none", "experiment=ch10", "slowdown=false",
                                          f"workload={p.workload}", f"engine.profile={profile}", f"slo={slo}",
                                          f"scheduler.budget={budget}", f"workload.num_requests={p.num_requests}",
                                          *mix(p, share), *p.overrides])
                out += [({"share": share, "slo": slo, "budget": budget, "seed": seed}, cfg, p.target, p.rel_tol)
                        for seed in p.seeds]
    return out


def verdicts(caps: pd.DataFrame) -> pd.DataFrame:
    """Per (share, slo): smallest budget against largest on the same seeds, and the best budget."""
    rows = []
    for (share, slo), g in caps.groupby(["share", "slo"], sort=False):
        by = g.pivot(index="seed", columns="budget", values="capacity_req_per_s").sort_index()
        small, large = by.columns.min(), by.columns.max()
        iv = interval(of_values(by[large].to_numpy(), np.median), of_values(by[small].to_numpy(), np.median),
                      by.index.to_numpy())
        verdict = iv.verdict("higher")  # "a small budget raises capacity"
        medians = by.median()
        rows.append({"share": share, "slo": slo, "small_budget": int(small), "large_budget": int(large),
                     "small_req_per_s": iv.b, "large_req_per_s": iv.a, "change": iv.text(),
                     "small_budget_effect": {HOLDS: HELPS, FAILS: HURTS}.get(verdict, "makes no difference"),
                     "best_budget": int(medians.idxmax()), "best_req_per_s": float(medians.max())})
    return pd.DataFrame(rows)


def crossover(v: pd.DataFrame) -> dict[str, float | None]:
    """Per SLO: the smallest share at which a small budget no longer helps, after a share where it did
    (None: it helps at every share, or at none)."""
    out = {}
    for slo, g in v.groupby("slo", sort=False):
        g = g.sort_values("share")
        helped = False
        out[slo] = None
        for r in g.itertuples():
            helped = helped or r.small_budget_effect == HELPS
            if helped and r.small_budget_effect != HELPS:
                out[slo] = float(r.share)
                break
    return out


def run(p: SimShareParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (capacity.csv, verdicts.csv, metrics.json) and the table."""
    caps = pd.DataFrame(simulate_many(jobs(p, profile), p.processes, fn=cell_capacity, label="sim_share"))
    out_dir.mkdir(parents=True, exist_ok=True)
    caps.to_csv(out_dir / "capacity.csv", index=False, float_format="%.5g")
    v = verdicts(caps)
    v.to_csv(out_dir / "verdicts.csv", index=False, float_format="%.5g")
    cross = crossover(v)
    write_json(out_dir / "metrics.json", {"sim_share": {  # crossover: null where there is none in the grid
        "crossover_share": {slo: x for slo, x in cross.items()},
        "best_budget": {slo: {f"share_{int(round(100 * r.share))}": r.best_budget for r in g.itertuples()}
                        for slo, g in v.groupby("slo", sort=False)}}})
    table = pd.DataFrame({
        "long prompts": [f"{100 * s:.0f}%" for s in v["share"]], "SLO": [f"`{s}`" for s in v["slo"]],
        "smallest budget (req/s)": [f"{b}: {c:.2f}" for b, c in zip(v["small_budget"], v["small_req_per_s"])],
        "largest budget (req/s)": [f"{b}: {c:.2f}" for b, c in zip(v["large_budget"], v["large_req_per_s"])],
        "change [95% CI]": v["change"], "small budget": v["small_budget_effect"],
        "best budget (req/s)": [f"{b}: {c:.2f}" for b, c in zip(v["best_budget"], v["best_req_per_s"])]})
    cross_text = "; ".join(f"`{slo}`: " + (f"{100 * x:.0f}% long prompts" if x is not None else "none in the grid")
                           for slo, x in cross.items())
    write_text(table_path, "\n\n".join([
        "### Prefill share against budget: which budget serves the most (simulated)",
        f"SIMULATED with this machine's profile. The ch10 mix with {', '.join(f'{100 * s:.0f}%' for s in p.shares)} "
        f"of its prompts long (1536 tokens; the chapter's mix has 35%), budgets {', '.join(map(str, p.budgets))}. "
        f"Capacity as the capacity stage defines it ({p.target:.0%} of {p.num_requests} requests within the SLO), per "
        f"seed ({', '.join(map(str, p.seeds))}), the median over seeds printed; the change is the smallest budget's "
        "against the largest's by the report's paired rule, seeds as the units.",
        table.to_markdown(index=False),
        f"Crossover (the smallest share at which a small budget stops helping): {cross_text}. Every cell: "
        "outputs/simulated/share/capacity.csv.",
        f"Conditions: {simulated_conditions([f'engine.profile={profile}', *p.overrides])}", ""]))
    print(table.to_string(index=False))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_share --params params.yaml --profile outputs/profiles/machine.json
        --out outputs/simulated/share --table outputs/simulated/tables/share.md
    """
    args = arguments(__doc__, "params", "profile", "out", "table", argv=argv)
    run(read_section(args.params, "sim_share", SimShareParams), profile=args.profile, out_dir=args.out,
        table_path=args.table)


if __name__ == "__main__":
    main()
