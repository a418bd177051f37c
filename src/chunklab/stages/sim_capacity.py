"""Stage sim_capacity (simulated): capacity of each workload at the chapter's budgets and at its
tuned settings: the highest Poisson rate at which >= target of the requests meet the SLO, pooled
over sim.seeds of sim.num_requests requests, bracketed to hi / lo <= 1 + rel_tol."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import yaml

from chunklab.experiments.capacity import search
from chunklab.experiments.compose import compose_run_config, simulated_conditions
from chunklab.stages.common import arguments, read_section, write_json, write_text
from chunklab.stages.shared_params import SimParams
from chunklab.stages.typed_yaml import Section


@Section
class SimCapacityParams:
    workloads: list[str]
    budgets: list[int]
    target: float
    rel_tol: float


KNOBS = ("budget", "budget_policy", "max_partial_prefills", "long_prefill_threshold", "ordering")


def settings(workload: str, p: SimCapacityParams, tuning_dir: Path) -> list[tuple[str, list[str]]]:
    """(label, scheduler overrides): the chapter's budgets, then the tuned settings (sim_tuning's
    best_<workload>.yaml in tuning_dir)."""
    out = [(f"budget {b}", [f"scheduler.budget={b}"]) for b in p.budgets]
    best = yaml.safe_load((tuning_dir / f"best_{workload}.yaml").read_text())["best_params"]
    tuned = [f"{k}={v}" for k, v in best.items()]
    out.append(("tuned: " + ", ".join(f"{k.split('.')[-1]}={v}" for k, v in best.items()), tuned))
    return out


def run(p: SimCapacityParams, sim: SimParams, profile: Path, tuning_dir: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (capacity.csv, probes.csv, metrics.json; the plots stage draws them) and the table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    caps, probes = [], []
    for workload in p.workloads:
        for label, overrides in settings(workload, p, tuning_dir):
            cfg = compose_run_config(["engine=simulated", f"engine.profile={profile}", "tracking=none", f"workload={workload}", *overrides,
                                      *sim.overrides])
            cfg = dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, num_requests=sim.num_requests))
            found = search(cfg, sim.seeds, p.target, rel_tol=p.rel_tol, processes=sim.processes)
            key = {"workload": workload, "setting": label} | {k: getattr(cfg.scheduler, k) for k in KNOBS}
            caps.append(key | {"capacity_req_per_s": found.lo_req_per_s, "fails_at_req_per_s": found.hi_req_per_s,
                               "hi_over_lo": found.hi_req_per_s / found.lo_req_per_s, "probes": len(found.probes)})
            probes += [key | pr for pr in found.probes]
            print(f"[sim_capacity] {workload} {label}: [{found.lo_req_per_s:.3f}, {found.hi_req_per_s:.3f}] req/s",
                  flush=True)
    caps, probes = pd.DataFrame(caps), pd.DataFrame(probes)
    caps.to_csv(out_dir / "capacity.csv", index=False, float_format="%.6g")
    nested: dict = {}  # dvc metrics show: sim_capacity.<workload>.b<budget> | tuned (req/s)
    for r in caps.itertuples():
        key = "tuned" if r.setting.startswith("tuned") else f"b{r.budget}"
        nested.setdefault(r.workload, {})[key] = round(float(r.capacity_req_per_s), 4)
    write_json(out_dir / "metrics.json", {"sim_capacity": nested})
    probes.to_csv(out_dir / "probes.csv", index=False, float_format="%.6g")
    table = caps[["workload", "setting", "capacity_req_per_s", "fails_at_req_per_s", "hi_over_lo"]].rename(columns={
        "capacity_req_per_s": "capacity (req/s): passes", "fails_at_req_per_s": "fails at (req/s)"})
    note = (f"SIMULATED. Capacity: the highest Poisson arrival rate at which >= {p.target:.0%} of the requests "
            f"meet the chapter's SLO (TTFT <= 1 s, TPOT <= 50 ms), pooled over seeds {sim.seeds} of "
            f"{sim.num_requests} requests each; bisection in log-rate until hi/lo <= {1 + p.rel_tol:.2f}. "
            f"The capacity lies between the two columns. Every probe is in outputs/simulated/capacity/probes.csv."
            f"\n\nConditions: {simulated_conditions([f'engine.profile={profile}', *sim.overrides])}")
    write_text(table_path, "### Capacity by configuration (simulated)\n\n"
               + table.to_markdown(index=False, floatfmt=".3f") + "\n\n" + note + "\n")


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_capacity --params params.yaml --profile outputs/profiles/machine.json --tuning outputs/simulated/tuning
        --out outputs/simulated/capacity --table outputs/simulated/tables/capacity.md
    """
    args = arguments(__doc__, "params", "profile", "tuning", "out", "table", argv=argv)
    run(read_section(args.params, "sim_capacity", SimCapacityParams), read_section(args.params, "sim", SimParams),
        profile=args.profile, tuning_dir=args.tuning, out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
