"""Stage token_budget (measured): the chapter's trace on the real engine.

- small: the chapter's 24-request trace at each budget and seed (its layout, seed spread).
- large: each budget at the chapter's fixed 8 req/s, `repeats` runs of one seed (the machine's
  noise), plus `seeds` (the workload's noise). The budgets at loads of this machine's measured
  capacity are the fidelity stage's grid (one measurement serves the budget table and fidelity).

Predictions (the noise guard) and loads use this machine's profile (the calibrate stage's).
Every run goes through chunklab.app (the path run.py takes) and is logged to MLflow
(experiment "dvc_token_budget").
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.experiments.sweep import grid, run_grid
from chunklab.stages.common import arguments, read_section, runs_dir, write_json
from chunklab.stages.typed_yaml import Section


@Section
class TokenBudgetParams:
    budgets: list[int]
    seeds: list[int]
    small_requests: int
    large_requests: int
    seed: int
    repeats: int
    extra_seeds: list[int]
    rate_per_s: float
    overrides: list[str]


def intensity(point: dict) -> str:
    return f"{point['workload.rate_per_s']:g} req/s"


def large_points(p: TokenBudgetParams) -> list[dict]:
    """Repeats outermost, so a slow spell of this shared machine hits every cell alike."""
    points = []
    for repeat in range(p.repeats):
        points += [{"workload.rate_per_s": p.rate_per_s, "scheduler.budget": b, "workload.seed": p.seed,
                    "repeat": repeat} for b in p.budgets]
    for seed in p.extra_seeds:
        points += [{"workload.rate_per_s": p.rate_per_s, "scheduler.budget": b, "workload.seed": seed, "repeat": 0}
                   for b in p.budgets]
    return points


def run(p: TokenBudgetParams, profile: Path, out_dir: Path) -> None:
    """Writes out_dir: runs.csv, requests.csv, tokens.csv, steps_large.csv, conditions.json.
    profile: this machine's profile (engine.profile), named in the runs' conditions as given."""
    runs = runs_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    base = ["experiment=ch10", "tracking.progress=false", "tracking.experiment_name=dvc_token_budget",
            f"engine.profile={profile}", *p.overrides]
    small = run_grid("budget-small", base + [f"workload.num_requests={p.small_requests}"],
                     grid({"scheduler.budget": p.budgets, "workload.seed": p.seeds}), runs,
                     keep_tokens=lambda pt: pt["workload.seed"] == p.seeds[0])
    points = large_points(p)
    large = run_grid("budget-large", base + [f"workload.num_requests={p.large_requests}", "slowdown=false"],
                     [{k: v for k, v in pt.items() if k != "repeat"} for pt in points], runs, keep_steps=True)
    large.runs.insert(0, "repeat", [pt["repeat"] for pt in points])
    large.runs.insert(0, "intensity", [intensity(pt) for pt in points])
    large.requests.insert(0, "intensity", large.requests["run"].map(lambda i: intensity(points[i])))
    for frame in (small.runs, small.requests):
        frame.insert(0, "intensity", f"{p.rate_per_s:g} req/s")
    for res, size in ((small, "small"), (large, "large")):
        res.runs.insert(0, "size", size)
        res.requests.insert(0, "size", size)
    pd.concat([small.runs, large.runs]).to_csv(out_dir / "runs.csv", index=False, float_format="%.6g")
    pd.concat([small.requests, large.requests]).to_csv(out_dir / "requests.csv", index=False, float_format="%.6g")
    small.tokens.to_csv(out_dir / "tokens.csv", index=False, float_format="%.6g")
    large.steps.to_csv(out_dir / "steps_large.csv", index=False, float_format="%.5g")  # the noise guard's raw data
    write_json(out_dir / "conditions.json", {"small": small.conditions[0], "large": large.conditions[0],
                                             "lines": small.conditions + large.conditions})


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.token_budget --params params.yaml --profile outputs/profiles/machine.json --out outputs/token_budget
    """
    args = arguments(__doc__, "params", "profile", "out", argv=argv)
    run(read_section(args.params, "token_budget", TokenBudgetParams), profile=args.profile, out_dir=args.out)


if __name__ == "__main__":
    main()
