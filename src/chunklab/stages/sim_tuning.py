"""Stage sim_tuning (simulated): Hydra's Optuna sweeper (conf/hparams_search/ch10_goodput.yaml)
over the scheduler's knobs, per workload, through run.py itself on the simulated engine, at the
default scheduler's capacity (workload.load). Exact for the profile, so it reproduces byte for byte."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from chunklab.experiments.compose import simulated_conditions
from chunklab.paths import project_dir
from chunklab.stages.common import arguments, read_section, runs_dir, write_text
from chunklab.stages.shared_params import SimParams
from chunklab.stages.typed_yaml import Section


@Section
class SimTuningParams:
    workloads: list[str]
    n_trials: int
    load: float
    seed: int


KNOBS = ("scheduler.budget", "scheduler.budget_policy", "scheduler.max_partial_prefills", "scheduler.long_prefill_threshold",
         "scheduler.ordering")


def start_sweep(workload: str, p: SimTuningParams, sim: SimParams, profile: Path, runs: Path) -> subprocess.Popen:
    """Starts one workload's sweep in runs/sim_tuning/<workload> (emptied first). Its trials run one
    after another, so the stage runs the workloads' sweeps side by side, one a core."""
    sweep_dir = runs / "sim_tuning" / workload
    shutil.rmtree(sweep_dir, ignore_errors=True)
    cmd = [sys.executable, "run.py", "hparams_search=ch10_goodput", "engine=simulated", f"engine.profile={profile}", "tracking=none",
           f"workload={workload}", f"workload.num_requests={sim.num_requests}", f"workload.load={p.load}",
           f"workload.seed={p.seed}", f"hydra.sweeper.n_trials={p.n_trials}",
           f"hydra.sweeper.sampler.seed={p.seed}", f"hydra.sweep.dir={sweep_dir}", *sim.overrides, "-m"]
    # dvc runs this stage under scripts/exact.sh: TPE's arithmetic, and so its trials, the same on any CPU
    return subprocess.Popen(cmd, cwd=project_dir(), stdout=subprocess.DEVNULL)


def sweep_result(workload: str, runs: Path) -> tuple[dict, pd.DataFrame]:
    """A finished sweep's best_config.yaml without the local sweep_dir, and every trial's knobs and metrics."""
    sweep_dir = runs / "sim_tuning" / workload
    best = yaml.safe_load((sweep_dir / "best_config.yaml").read_text())
    best.pop("sweep_dir", None)  # a local path: not part of the result
    trials = []
    for job in sorted((d for d in sweep_dir.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)):
        overrides = dict(o.split("=", 1) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
        summary = json.loads((job / "summary.json").read_text())["summary"]
        trials.append({"workload": workload, "trial": int(job.name)} | {k.split(".")[-1]: overrides[k] for k in KNOBS}
                      | {m: summary[m] for m in ("goodput_req_per_s", "slo_attainment", "ttft_p99_s", "itl_p99_s")})
    return best, pd.DataFrame(trials)


def sweep(workload: str, p: SimTuningParams, sim: SimParams, profile: Path, runs: Path) -> tuple[dict, pd.DataFrame]:
    """One workload's sweep, start to finish."""
    if start_sweep(workload, p, sim, profile, runs).wait() != 0:
        raise SystemExit(f"sim_tuning: the sweep of {workload} failed; its error is above")
    return sweep_result(workload, runs)


def run(p: SimTuningParams, sim: SimParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (best_<workload>.yaml per workload, trials.csv) and the table at table_path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, trials = [], []
    sweeps = {workload: start_sweep(workload, p, sim, profile, runs_dir()) for workload in p.workloads}
    failed = [f"{w} (exit {code})" for w, code in ((w, proc.wait()) for w, proc in sweeps.items()) if code != 0]
    if failed:
        raise SystemExit(f"sim_tuning: the sweep of {', '.join(failed)} failed; its error is above")
    for workload in p.workloads:
        best, tr = sweep_result(workload, runs_dir())
        (out_dir / f"best_{workload}.yaml").write_text(yaml.safe_dump(best, sort_keys=False))
        trials.append(tr)
        rows.append({"workload": workload} | {k.split(".")[-1]: best["best_params"][k] for k in KNOBS}
                    | {"goodput (req/s)": best["best_goodput_req_per_s"],
                       "worst trial goodput": tr["goodput_req_per_s"].min()})
        print(f"[sim_tuning] {workload}: {best['best_params']} -> {best['best_goodput_req_per_s']:.3f} req/s", flush=True)
    pd.concat(trials).to_csv(out_dir / "trials.csv", index=False, float_format="%.6g")
    note = (f"SIMULATED. Optuna TPE (seed {p.seed}), {p.n_trials} trials per workload, each "
            f"{sim.num_requests} requests (seed {p.seed}) at load {p.load} (the default scheduler's "
            "simulated capacity); objective: goodput under the chapter's SLO. Every trial is in "
            f"outputs/simulated/tuning/trials.csv.\n\nConditions: {simulated_conditions([f'engine.profile={profile}', *sim.overrides])}")
    write_text(table_path, "### Tuned scheduler per workload (simulated)\n\n"
               + pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f") + "\n\n" + note + "\n")


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_tuning --params params.yaml --profile outputs/profiles/machine.json
        --out outputs/simulated/tuning --table outputs/simulated/tables/tuning.md
    """
    args = arguments(__doc__, "params", "profile", "out", "table", argv=argv)
    run(read_section(args.params, "sim_tuning", SimTuningParams), read_section(args.params, "sim", SimParams),
        profile=args.profile, out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
