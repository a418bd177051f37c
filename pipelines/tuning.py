"""Stage tuning: Hydra's Optuna sweeper (conf/hparams_search/ch10_goodput.yaml) per workload,
through run.py itself, so the stage is exactly what a user runs.

Writes outputs/tuning/ (best config per workload, every trial) and outputs/tables/tuning.md.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import yaml

from common import OUTPUTS, ROOT, RUNS, params

KNOBS = ("scheduler.budget", "scheduler.max_partial_prefills", "scheduler.long_prefill_threshold", "scheduler.ordering")


def sweep(workload: str, p: dict) -> tuple[dict, pd.DataFrame]:
    sweep_dir = RUNS / "tuning" / workload
    shutil.rmtree(sweep_dir, ignore_errors=True)
    cmd = [sys.executable, "run.py", "hparams_search=ch10_goodput", f"workload={workload}",
           f"workload.num_requests={p['num_requests']}", f"workload.rate_per_s={p['rate_per_s']}",
           f"workload.seed={p['seed']}", f"hydra.sweeper.n_trials={p['n_trials']}",
           f"hydra.sweeper.sampler.seed={p['seed']}", f"hydra.sweep.dir={sweep_dir}", *p["overrides"], "-m"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    best = yaml.safe_load((sweep_dir / "best_config.yaml").read_text())
    trials = []
    for job in sorted((d for d in sweep_dir.iterdir() if d.name.isdigit()), key=lambda d: int(d.name)):
        overrides = dict(o.split("=", 1) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
        summary = json.loads((job / "summary.json").read_text())["summary"]
        trials.append({"workload": workload, "trial": int(job.name)} | {k.split(".")[-1]: overrides[k] for k in KNOBS}
                      | {m: summary[m] for m in ("goodput_req_per_s", "slo_attainment", "ttft_p99_s", "itl_p99_s")})
    return best, pd.DataFrame(trials)


def main() -> None:
    p = params("tuning")
    out = OUTPUTS / "tuning"
    out.mkdir(parents=True, exist_ok=True)
    rows, trials, lines = [], [], []
    for workload in p["workloads"]:
        best, tr = sweep(workload, p)
        lines.append(json.loads((RUNS / "tuning" / workload / "0" / "summary.json").read_text())["conditions_line"])
        (out / f"best_{workload}.yaml").write_text(yaml.safe_dump(best, sort_keys=False))
        trials.append(tr)
        rows.append({"workload": workload} | {k.split(".")[-1]: best["best_params"][k] for k in KNOBS}
                    | {"goodput (req/s)": best["best_goodput_req_per_s"],
                       "worst trial goodput": tr["goodput_req_per_s"].min()})
        print(f"[tuning] {workload}: {best['best_params']} -> {best['best_goodput_req_per_s']:.3f} req/s", flush=True)
    pd.concat(trials).to_csv(out / "trials.csv", index=False, float_format="%.6g")
    note = (f"Optuna TPE (seed {p['seed']}), {p['n_trials']} trials per workload, each {p['num_requests']} requests "
            f"at {p['rate_per_s']} req/s (seed {p['seed']}), objective: goodput under the chapter's SLO. "
            "Every trial is in outputs/tuning/trials.csv and in MLflow (experiment `tuning`).\n\n"
            + "\n\n".join(f"Conditions (first trial): {line}" for line in lines))
    (OUTPUTS / "tables").mkdir(exist_ok=True)
    (OUTPUTS / "tables" / "tuning.md").write_text("### Tuned scheduler per workload\n\n"
                                                   + pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f")
                                                   + "\n\n" + note + "\n")


if __name__ == "__main__":
    main()
