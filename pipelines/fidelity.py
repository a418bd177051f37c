"""Stage fidelity: the measured runs of the token_budget stage (repeats of one seed at each
budget and intensity) against the simulated engine on the same workloads, metric by metric,
with the goals of chunklab.report.fidelity.

Writes outputs/fidelity/ (fidelity.csv, runs.csv, step_error.csv, fidelity.png) and
outputs/tables/fidelity.md.
"""
from __future__ import annotations

import json

import pandas as pd

from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.simulate import simulate_many
from chunklab.metrics.conditions import sim_conditions_line
from chunklab.report import figures
from chunklab.report.fidelity import GOALS, fidelity_table, step_error_table
from common import OUTPUTS, params, write_json

METRICS = list(GOALS) + ["slo_attainment", "output_tokens_per_s", "noisy_steps_share", "worst_step_excess"]


def main() -> None:
    p = params("fidelity")
    tb = params("token_budget")
    out = OUTPUTS / "fidelity"
    out.mkdir(parents=True, exist_ok=True)
    measured = pd.read_csv(OUTPUTS / "token_budget" / "runs.csv")
    real = measured[(measured["size"] == "large") & (measured["seed"] == tb["seed"])].copy()
    real["executor"] = "torch"
    points = real.groupby(["intensity", "budget"])["rate_per_s"].first().reset_index()
    base = ["experiment=ch10", "tracking=none", f"workload.num_requests={tb['large_requests']}",
            f"workload.seed={tb['seed']}", "slowdown=false", *tb["overrides"]]
    cfgs = [compose_run_config(base + [f"scheduler.budget={r.budget}", intensity_override(r.intensity)])
            for r in points.itertuples()]
    sims = simulate_many(cfgs, p["processes"])
    sim = points.assign(executor="simulated", **{m: [s.get(m) for s in sims] for m in METRICS})
    sim["rate_per_s"] = [c.workload.rate_per_s for c in cfgs]
    runs = pd.concat([real[["executor", "intensity", "budget", "rate_per_s", "repeat"] + METRICS], sim])
    table = fidelity_table(runs)
    steps = pd.read_csv(OUTPUTS / "token_budget" / "steps_large.csv")
    step_err = step_error_table(steps)
    runs.to_csv(out / "runs.csv", index=False, float_format="%.6g")
    table.to_csv(out / "fidelity.csv", index=False, float_format="%.6g")
    step_err.to_csv(out / "step_error.csv", index=False, float_format="%.4g")
    cond = json.loads((OUTPUTS / "token_budget" / "conditions.json").read_text())
    lines = {"measured": cond["large"], "simulated": sim_conditions_line(cfgs[0])}
    (out / "conditions.json").write_text(json.dumps(lines, indent=2) + "\n")
    figures.fidelity(table, out / "fidelity.png")
    tail = table["metric"].str.contains("p95|p99")
    write_json(out / "metrics.json", {"rows_meeting_goal": round(float(table["met"].mean()), 4),
                                      "max_rel_error_p50_and_goodput": round(float(table[~tail]["rel_error"].max()), 4),
                                      "max_rel_error_p95_p99": round(float(table[tail]["rel_error"].max()), 4)})
    (OUTPUTS / "tables").mkdir(exist_ok=True)
    md = markdown(tb, runs, table, step_err, lines)
    (OUTPUTS / "tables" / "fidelity.md").write_text(md)
    print(md)


def intensity_override(intensity: str) -> str:
    """The override a token_budget intensity label came from: the same load resolves to the same rate."""
    if intensity.startswith("load "):
        return f"workload.load={intensity.split()[1]}"
    return f"workload.rate_per_s={intensity.split()[0]}"


def markdown(tb, runs, table, step_err, lines) -> str:
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
        f"The ch10 mix, {tb['large_requests']} requests, seed {tb['seed']}, budgets {tb['budgets']} at "
        f"{tb['rate_per_s']:g} req/s and at loads {tb['loads']} of the simulated capacity: each point measured "
        f"{tb['repeats']} times on the real engine (same seed; the token_budget stage) and simulated once. "
        f"rel_error = |simulated - measured median| / measured median. {100 * met:.0f}% of {len(table)} "
        f"(metric, budget, rate) rows meet their goal.", "",
        summary.to_markdown(floatfmt=".3f"), "",
        "Worst rows:", "", worst.to_markdown(index=False, floatfmt=".4g"), "",
        "Measured / predicted step time by step kind (every step of the measured runs): where the cost model "
        "is off.", "", step_err.to_markdown(index=False, floatfmt=".3f"), "",
        f"Measured: {lines['measured']}; {noise}.", "",
        f"Simulated: {lines['simulated']}.", "",
    ])


if __name__ == "__main__":
    main()
