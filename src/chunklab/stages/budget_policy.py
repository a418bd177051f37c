"""Stage budget_policy (measured): a budget policy on the real engine, on the load grid's requests.

The fidelity stage measures every fixed budget at each load of the grid on five seeds (the same
arrivals at every budget). This stage runs the policy (params `policy`, a conf/scheduler/ file) on
those very requests, once under each SLO family it is given: the policy reads its gap target from
the SLO in force, so each family is its own arm. It writes the runs and their requests; the report
sets them against the grid's fixed budgets (report/budget_policy.py), as it scores the grid itself.
"""
from __future__ import annotations

import json
from pathlib import Path

from chunklab.experiments.sweep import run_grid
from chunklab.stages.common import arguments, measured_capacity, read_section, runs_dir
from chunklab.stages.typed_yaml import Section

@Section
class BudgetPolicyParams:
    policy: str  # a conf/scheduler/ file naming a budget policy
    slos: list[str]  # SLO families; the policy runs under each (its gap target is the SLO's)
    workload: str  # the fidelity grid's: its runs are the fixed arms
    num_requests: int
    seeds: list[int]
    loads: list[float]  # of the capacity stage's reference cell, as the fidelity grid's
    overrides: list[str]


def points(p: BudgetPolicyParams, capacity_req_per_s: float) -> list[dict]:
    """The policy's runs: the fidelity grid's requests (seed, rate) under each SLO family."""
    return [{"experiment": "ch10", "workload": p.workload, "workload.num_requests": p.num_requests,
             "workload.seed": seed, "workload.rate_per_s": round(load * capacity_req_per_s, 4),
             "scheduler": p.policy, "slo": slo}
            for slo in p.slos for seed in p.seeds for load in p.loads]


def run(p: BudgetPolicyParams, profile: Path, capacity_csv: Path, out_dir: Path) -> None:
    """Writes out_dir: runs.csv (one row a run), requests.csv (every request of the policy's runs, its
    arm and SLO family in columns; without the gaps), conditions.json. profile: the fidelity stage's (its scaled SLOs' seconds and the
    policy's step-time predictions); capacity_csv: the capacity stage's, whose reference cell the loads
    are fractions of."""
    capacity = measured_capacity(capacity_csv)
    base = ["tracking.progress=false", "tracking.experiment_name=dvc_budget_policy", "slowdown=false",
            f"engine.profile={profile}", *p.overrides]
    res = run_grid("budget_policy", base, points(p, capacity), runs_dir())
    out_dir.mkdir(parents=True, exist_ok=True)
    res.runs.to_csv(out_dir / "runs.csv", index=False, float_format="%.6g")
    res.requests.drop(columns=["gaps_s"]).assign(arm=p.policy).to_csv(out_dir / "requests.csv", index=False,
                                                                       float_format="%.6g")
    (out_dir / "conditions.json").write_text(json.dumps({"measured": res.conditions[0]}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.budget_policy --params params.yaml --profile outputs/profiles/machine.json
        --capacity outputs/capacity/measured_vs_simulated.csv --out outputs/budget_policy
    """
    args = arguments(__doc__, "params", "profile", "capacity", "out", argv=argv)
    run(read_section(args.params, "budget_policy", BudgetPolicyParams), profile=args.profile, capacity_csv=args.capacity,
        out_dir=args.out)


if __name__ == "__main__":
    main()
