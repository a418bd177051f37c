"""Stage fidelity: the same workloads on the real engine (repeats of one seed) and in
simulation, metric by metric, against the goals in chunklab.report.fidelity.

Writes outputs/fidelity/ (fidelity.csv, runs.csv, step_error.csv, fidelity.png) and
outputs/tables/fidelity.md.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd

from chunklab.app import run_experiment
from chunklab.experiments.compose import compose_run_config
from chunklab.metrics.conditions import conditions_line
from chunklab.report import figures
from chunklab.report.fidelity import GOALS, fidelity_table, step_error_table
from common import OUTPUTS, params

STEP_COLUMNS = ["duration_s", "predicted_s", "num_decode_tokens", "num_prefill_tokens", "num_prefill_chunks"]
METRICS = list(GOALS) + ["slo_attainment", "output_tokens_per_s", "noisy_steps_share", "worst_step_excess"]


def one_run(p: dict, executor: str, budget: int, rate: float, run_dir: Path):
    cfg = compose_run_config(["experiment=ch10", "tracking=none", "tracking.progress=false",
                              f"engine.executor={executor}", f"workload.num_requests={p['num_requests']}",
                              f"workload.seed={p['seed']}", f"scheduler.budget={budget}",
                              f"workload.rate_per_s={rate}", "slowdown=false", *p["overrides"]])
    return run_experiment(cfg, run_dir)


def main() -> None:
    p = params("fidelity")
    out = OUTPUTS / "fidelity"
    out.mkdir(parents=True, exist_ok=True)
    rows, steps, lines = [], [], {}
    points = [(b, r) for r in p["rates"] for b in p["budgets"]]
    with tempfile.TemporaryDirectory() as tmp:
        # Repeats outermost: a slow spell of this shared machine hits every point alike.
        for repeat in range(p["repeats"]):
            for budget, rate in points:
                res = one_run(p, "torch", budget, rate, Path(tmp) / f"real-{repeat}-{budget}-{rate}")
                rows.append({"executor": "torch", "repeat": repeat, "budget": budget, "rate_per_s": rate}
                            | {m: res.summary.get(m) for m in METRICS})
                steps.append(res.result.steps.to_frame()[STEP_COLUMNS])
                lines.setdefault("measured", conditions_line(res.conditions))
                print(f"[fidelity] real #{repeat} budget {budget} rate {rate}: TTFT p50 "
                      f"{res.summary['ttft_p50_s']:.3f}s goodput {res.summary['goodput_req_per_s']:.2f}", flush=True)
        for budget, rate in points:
            res = one_run(p, "simulated", budget, rate, Path(tmp) / f"sim-{budget}-{rate}")
            rows.append({"executor": "simulated", "repeat": 0, "budget": budget, "rate_per_s": rate}
                        | {m: res.summary.get(m) for m in METRICS})
            lines.setdefault("simulated", conditions_line(res.conditions))
    runs = pd.DataFrame(rows)
    table = fidelity_table(runs)
    step_err = step_error_table(pd.concat(steps, ignore_index=True))
    runs.to_csv(out / "runs.csv", index=False, float_format="%.6g")
    table.to_csv(out / "fidelity.csv", index=False, float_format="%.6g")
    step_err.to_csv(out / "step_error.csv", index=False, float_format="%.4g")
    (out / "conditions.json").write_text(json.dumps(lines, indent=2) + "\n")
    figures.fidelity(table, out / "fidelity.png")
    (OUTPUTS / "tables").mkdir(exist_ok=True)
    (OUTPUTS / "tables" / "fidelity.md").write_text(markdown(p, runs, table, step_err, lines))
    print(markdown(p, runs, table, step_err, lines))


def markdown(p, runs, table, step_err, lines) -> str:
    met = table["met"].mean()
    worst = table.sort_values("rel_error", ascending=False).head(8)
    real = runs[runs["executor"] == "torch"]
    noise = (f"noise guard over the {len(real)} measured runs: steps slower than 2x their prediction "
             f"{100 * real['noisy_steps_share'].median():.2f}% median (max {100 * real['noisy_steps_share'].max():.2f}%), "
             f"worst step {real['worst_step_excess'].max():.1f}x its prediction")
    summary = table.pivot_table(index="metric", values="rel_error", aggfunc=["median", "max"])
    summary.columns = ["median rel_error", "max rel_error"]
    summary["goal"] = pd.Series(GOALS)
    return "\n".join([
        "### Fidelity: simulated against measured", "",
        f"The ch10 mix, {p['num_requests']} requests, seed {p['seed']}, budgets {p['budgets']} x Poisson rates "
        f"{p['rates']} req/s: each point measured {p['repeats']} times on the real engine (same seed) and simulated "
        f"once. rel_error = |simulated - real median| / real median. {100 * met:.0f}% of "
        f"{len(table)} (metric, budget, rate) rows meet their goal.", "",
        summary.to_markdown(floatfmt=".3f"), "",
        "Worst rows:", "", worst.to_markdown(index=False, floatfmt=".4g"), "",
        "Measured / predicted step time by step kind (every measured step of these runs): where the cost model "
        "is off.", "", step_err.to_markdown(index=False, floatfmt=".3f"), "",
        f"Measured: {lines['measured']}; {noise}.", "",
        f"Simulated: {lines['simulated']}.", "",
    ])


if __name__ == "__main__":
    main()
