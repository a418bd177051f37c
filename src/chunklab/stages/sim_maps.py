"""Stage sim_maps (simulated): budget x load maps per workload, the chapter's question at a
resolution no measured run gives. Each cell: sim.seeds x sim.num_requests requests at
load x the default scheduler's simulated capacity."""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pandas as pd

from chunklab.config import RunConfig
from chunklab.experiments.compose import compose_run_config, simulated_conditions
from chunklab.experiments.load import workload_capacity
from chunklab.experiments.simulate import simulate_many
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


def cells(workload: str, p: SimMapsParams, sim: SimParams, profile: Path) -> pd.DataFrame:
    grid = list(itertools.product(p.budgets, p.loads, sim.seeds))
    base = compose_run_config(["engine=simulated", f"engine.profile={profile}", "tracking=none", f"workload={workload}",
                               f"workload.num_requests={sim.num_requests}", "workload.load=1.0", *sim.overrides])
    capacity = workload_capacity(base)
    cfgs = [cell_config(base, capacity, b, load, seed) for b, load, seed in grid]
    summaries = simulate_many(cfgs, sim.processes, label="sim_maps")
    runs = pd.DataFrame([{"workload": workload, "budget": b, "load": load, "seed": seed,
                          "rate_per_s": c.workload.rate_per_s} | {m: s.get(m) for m in METRICS}
                         for (b, load, seed), c, s in zip(grid, cfgs, summaries)])
    # Per cell: the mean over seeds (p99s are each seed's p99, averaged; worst stall is the max).
    agg = {m: "mean" for m in METRICS} | {"worst_stall_s": "max", "rate_per_s": "first"}
    return runs.groupby(["workload", "budget", "load"]).agg(agg).reset_index()


def best_budget(table: pd.DataFrame) -> pd.DataFrame:
    """Per workload and load: the budget with the highest goodput; ties go to the lower TTFT p99."""
    ranked = table.sort_values(["workload", "load", "goodput_req_per_s", "ttft_p99_s"],
                               ascending=[True, True, False, True])
    return ranked.groupby(["workload", "load"]).head(1).reset_index(drop=True)


def run(p: SimMapsParams, sim: SimParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (cells.csv, best_budget.csv; the plots stage draws them) and the table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pd.concat([cells(w, p, sim, profile) for w in p.workloads], ignore_index=True)
    best = best_budget(table)
    table.to_csv(out_dir / "cells.csv", index=False, float_format="%.6g")
    best.to_csv(out_dir / "best_budget.csv", index=False, float_format="%.6g")
    view = best[["workload", "load", "rate_per_s", "budget", "goodput_req_per_s", "slo_attainment", "ttft_p99_s",
                 "itl_p99_s"]].rename(columns={"budget": "best budget", "rate_per_s": "rate (req/s)"})
    md = ["### Best budget per load (simulated)", "", view.to_markdown(index=False, floatfmt=".3f"), "",
          f"SIMULATED. Budgets {p.budgets} x loads {p.loads} (x the default scheduler's simulated capacity "
          f"of each workload), {len(sim.seeds)} seeds x {sim.num_requests} requests per cell; cell values "
          "are means over seeds (worst stall: the max). Best = highest goodput, ties to the lower TTFT p99. "
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
