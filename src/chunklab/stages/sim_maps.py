"""Stage sim_maps (simulated): budget x load maps per workload, the chapter's question at a
resolution no measured run gives. Each cell: sim.seeds x sim.num_requests requests at
load x the default scheduler's simulated capacity.

Best budget per workload and load: the highest goodput (mean over seeds), and the budgets the
report's paired rule (metrics/paired.py) cannot tell from it: each budget's share of requests within
the SLO against the best's, on the same requests (paired by seed and request id); a budget whose
deficit is not a "holds" is a tie."""
from __future__ import annotations

import dataclasses
import itertools
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.config import RunConfig
from chunklab.experiments.compose import compose_run_config, simulated_conditions
from chunklab.experiments.load import workload_capacity
from chunklab.experiments.simulate import requests_of, simulate, simulate_many
from chunklab.metrics.paired import HOLDS, interval, of_values
from chunklab.metrics.summary import meets_slo_table
from chunklab.stages.common import arguments, read_section, write_text
from chunklab.stages.shared_params import SimParams
from chunklab.stages.typed_yaml import Section


@Section
class SimMapsParams:
    workloads: list[str]
    budgets: list[int]
    loads: list[float]


METRICS = ["goodput_req_per_s", "slo_attainment", "ttft_p99_s", "itl_p99_s", "worst_stall_s", "ttft_p50_s",
           "output_tokens_per_s"]


def cell_config(base: RunConfig, capacity: float, budget: int, load: float, seed: int) -> RunConfig:
    """What `scheduler.budget=B workload.load=L workload.seed=S` composes to, without composing
    560 times: the load resolves against the same cached capacity."""
    w = dataclasses.replace(base.workload, load=load, rate_per_s=load * capacity, seed=seed)
    return dataclasses.replace(base, workload=w, scheduler=dataclasses.replace(base.scheduler, budget=budget))


def cells(workload: str, p: SimMapsParams, sim: SimParams, profile: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cells (means over seeds) and every request's record with whether it met the SLO."""
    grid = list(itertools.product(p.budgets, p.loads, sim.seeds))
    base = compose_run_config(["engine=simulated", f"engine.profile={profile}", "tracking=none", f"workload={workload}",
                               f"workload.num_requests={sim.num_requests}", "workload.load=1.0", *sim.overrides])
    if base.slo.itl_p99_s is not None:
        raise SystemExit("sim_maps: its ties compare requests by TTFT and mean gap; an SLO with a p99 gap "
                         "(slo.itl_p99_s) needs per-request gaps it does not keep")
    capacity = workload_capacity(base)
    cfgs = [cell_config(base, capacity, b, load, seed) for b, load, seed in grid]
    results = simulate_many(cfgs, sim.processes, fn=partial(simulate, view=requests_of), label="sim_maps")
    runs = pd.DataFrame([{"workload": workload, "budget": b, "load": load, "seed": seed,
                          "rate_per_s": c.workload.rate_per_s} | {m: s.get(m) for m in METRICS}
                         for (b, load, seed), c, (s, _) in zip(grid, cfgs, results)])
    requests = pd.concat([pd.DataFrame(reqs).assign(workload=workload, budget=b, load=load, seed=seed)
                          for (b, load, seed), (_, reqs) in zip(grid, results)], ignore_index=True)
    requests["met"] = meets_slo_table(requests, base.slo)
    # Per cell: the mean over seeds (p99s are each seed's p99, averaged; worst stall is the max).
    agg = {m: "mean" for m in METRICS} | {"worst_stall_s": "max", "rate_per_s": "first"}
    return runs.groupby(["workload", "budget", "load"]).agg(agg).reset_index(), requests


def best_budget(table: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """Per workload and load: the budget with the highest goodput (ties in it to the lower TTFT p99),
    and `ties`: the other budgets whose share within the SLO the paired rule cannot tell below the best's."""
    ranked = table.sort_values(["workload", "load", "goodput_req_per_s", "ttft_p99_s"],
                               ascending=[True, True, False, True])
    best = ranked.groupby(["workload", "load"]).head(1).reset_index(drop=True)
    ties = []
    for r in best.itertuples():
        at = requests[(requests["workload"] == r.workload) & (requests["load"] == r.load)]
        lead = at[at["budget"] == r.budget].set_index(["seed", "request_id"])["met"]
        tied = []
        for budget, other in at[at["budget"] != r.budget].groupby("budget"):
            pair = pd.concat([lead, other.set_index(["seed", "request_id"])["met"]], axis=1, join="inner",
                             keys=["lead", "other"]).astype(float)
            iv = interval(of_values(pair["other"].to_numpy(), np.mean), of_values(pair["lead"].to_numpy(), np.mean),
                          pair.index.get_level_values("seed").to_numpy())
            if iv.verdict("higher") != HOLDS:  # the best is not decidedly above this budget
                tied.append(int(budget))
        ties.append(" ".join(map(str, sorted(tied))))
    return best.assign(ties=ties)


def run(p: SimMapsParams, sim: SimParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (cells.csv, best_budget.csv; the plots stage draws them) and the table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = [cells(w, p, sim, profile) for w in p.workloads]
    table = pd.concat([t for t, _ in parts], ignore_index=True)
    best = best_budget(table, pd.concat([r for _, r in parts], ignore_index=True))
    table.to_csv(out_dir / "cells.csv", index=False, float_format="%.6g")
    best.to_csv(out_dir / "best_budget.csv", index=False, float_format="%.6g")
    view = best[["workload", "load", "rate_per_s", "budget", "ties", "goodput_req_per_s", "slo_attainment",
                 "ttft_p99_s"]].rename(columns={"budget": "best budget", "rate_per_s": "rate (req/s)",
                                                "ties": "tied with (paired rule)"})
    view["tied with (paired rule)"] = view["tied with (paired rule)"].replace("", "none")
    md = ["### Best budget per load (simulated)", "", view.to_markdown(index=False, floatfmt=".3f"), "",
          f"SIMULATED. Budgets {p.budgets} x loads {p.loads} (x the default scheduler's simulated capacity "
          f"of each workload), {len(sim.seeds)} seeds x {sim.num_requests} requests per cell; cell values "
          "are means over seeds (worst stall: the max). Best = highest goodput (equal goodputs: the lower TTFT p99); "
          "tied with: the budgets whose share of requests within the SLO the report's paired rule cannot tell "
          "below the best's on the same requests (its deficit is not a 'holds': 95% interval, at least 2%). "
          "Every cell is in outputs/simulated/maps/cells.csv.", "", f"Conditions: {simulated_conditions([f'engine.profile={profile}', *sim.overrides])}",
          ""]
    write_text(table_path, "\n".join(md))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_maps --params params.yaml --profile outputs/profiles/machine.json
        --out outputs/simulated/maps --table outputs/simulated/tables/maps.md
    """
    args = arguments(__doc__, "params", "profile", "out", "table", argv=argv)
    run(read_section(args.params, "sim_maps", SimMapsParams), read_section(args.params, "sim", SimParams),
        profile=args.profile, out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
