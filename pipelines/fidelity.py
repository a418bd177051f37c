"""Stage fidelity (measured, then simulated): the real engine at fixed points, each repeated,
against the simulated engine on the same workloads with this machine's profile.

Points (params.yaml `fidelity`): the ch10 mix at loads of this machine's capacity and budgets,
and a slice of the conversation trace at its own timestamps. Each is measured `repeats` times
(same seed: the machine's noise) and simulated once with the profile fit on probe shapes and
serving replays (outputs/profiles/machine.json) and once with its probe-only fit (the "before").
Two comparisons: percentiles against the repeats' median (fidelity.csv), and per request,
paired by id (paired.csv). The measured steps score both fits on steps neither saw.

Writes outputs/fidelity/ and outputs/tables/fidelity.md.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.simulate import simulate_many, simulate_requests
from chunklab.metrics.conditions import sim_conditions_line
from chunklab.report import figures
from chunklab.report.fidelity import (GOALS, drift_correlation, drift_table, fidelity_table, paired_errors,
                                      paired_table, repeat_floor, step_error_table)
from common import MACHINE_PROFILE, OUTPUTS, RUNS, params, write_json

PROFILES = {"probe + serving": MACHINE_PROFILE, "probe only": "outputs/profiles/machine_probe_only.json"}
METRICS = list(GOALS) + ["slo_attainment", "output_tokens_per_s", "noisy_steps_share", "worst_step_excess",
                         "step_time_vs_predicted_p50"]


def points(p: dict) -> list[tuple[str, dict]]:
    """(label, overrides) of every point, named as paired.csv names them."""
    out = []
    extra = lambda overrides: dict(o.split("=", 1) for o in overrides)  # noqa: E731
    for budget, load in p["points"]:
        out.append((f"{p['workload']} b{budget} load {load:g}",
                    {"experiment": "ch10", "workload": p["workload"], "workload.num_requests": p["num_requests"],
                     "workload.seed": p["seed"], "workload.load": load, "scheduler.budget": budget}
                    | extra(p.get("mix_overrides", []))))
    t = p["trace"]
    out.append((f"azure_conv b{t['budget']} rows {t['start_offset']}-{t['start_offset'] + t['rows']}",
                {"workload": "azure_conv", "slo": "ch10", "workload.num_requests": t["rows"],
                 "workload.trace.start_offset": t["start_offset"], "scheduler.budget": t["budget"]}
                | extra(t.get("overrides", []))))
    return out


def main() -> None:
    from chunklab.experiments.sentinel import SpeedSentinel, geometric_mean  # torch: this stage measures
    from chunklab.experiments.sweep import run_grid

    p = params("fidelity")
    out = OUTPUTS / "fidelity"
    out.mkdir(parents=True, exist_ok=True)
    base = ["tracking.progress=false", "tracking.experiment_name=dvc_fidelity", "slowdown=false",
            f"engine.profile={PROFILES['probe + serving']}", *p["overrides"]]
    pts = points(p)
    order = [(r, label, pt) for r in range(p["repeats"]) for label, pt in pts]  # repeats outermost: drift hits all
    sentinel = SpeedSentinel.for_run(compose_run_config(base))
    readings = []
    read = lambda i: readings.append(sentinel.read()) or {"sentinel_before": readings[-1].ratio}  # noqa: E731
    res = run_grid("fidelity", base, [pt for _, _, pt in order], RUNS, keep_steps=True, before_each=read)
    read(len(order))  # after the last run
    # each run's speed: the geometric mean of the sentinels read just before and just after it
    res.runs["sentinel_after"] = [r.ratio for r in readings[1:]]
    res.runs["sentinel_ratio"] = [geometric_mean([a.ratio, b.ratio]) for a, b in zip(readings, readings[1:])]
    labels = [label for _, label, _ in order]
    res.runs.insert(0, "repeat", [r for r, _, _ in order])
    res.runs.insert(0, "point", labels)
    res.requests.insert(0, "repeat", res.requests["run"].map(lambda i: order[i][0]))
    res.requests.insert(0, "point", res.requests["run"].map(lambda i: labels[i]))
    # Simulated at the very rates the measured runs resolved (same seed, same requests).
    rates = res.runs.groupby("point", sort=False)["rate_per_s"].first()
    sims, paired, tables, errors, runs = {}, {}, {}, {}, [res.runs.assign(executor="torch")]
    for fit, profile in PROFILES.items():
        sim_base = ["tracking=none", "slowdown=false", f"engine.profile={profile}", *p["overrides"]]
        cfgs = [sim_config(sim_base, pt, rates[label]) for label, pt in pts]
        sims[fit] = simulate_many(cfgs, p["processes"], fn=simulate_requests)
        sim_req = pd.concat([pd.DataFrame(reqs).assign(point=label) for (label, _), (_, reqs) in zip(pts, sims[fit])])
        errors[fit] = paired_errors(res.requests, sim_req)
        paired[fit] = paired_table(errors[fit])
        sim_runs = pd.DataFrame([{"point": label, "budget": pt["scheduler.budget"], "rate_per_s": rates[label]} | summary
                                 for (label, pt), (summary, _) in zip(pts, sims[fit])]).assign(executor="simulated")
        runs.append(sim_runs.assign(fit=fit))
        tables[fit] = percentile_table(res.runs, sim_runs)
        if fit == "probe + serving":  # the profile the tables' main columns come from
            cond_lines = {"simulated": sim_conditions_line(cfgs[0])}
            # Drift-aware: each measured repeat against a simulation of its own, the profile's
            # step times scaled by that repeat's sentinel (and, as a check that cannot be a
            # prediction, by the repeat's own measured / predicted step ratio).
            for name, column in SCALED.items():
                scaled = [sim_config(sim_base, pt, rates[label], scale)
                          for (_, label, pt), scale in zip(order, res.runs[column])]
                result = simulate_many(scaled, p["processes"], fn=simulate_requests)
                sim_req = pd.concat([pd.DataFrame(reqs).assign(point=label, repeat=r)
                                     for (r, label, _), (_, reqs) in zip(order, result)])
                errors[name] = paired_errors(res.requests, sim_req, per_repeat=True)
                paired[name] = paired_table(errors[name])
                scaled_runs = pd.DataFrame([{"point": label, "repeat": r, "budget": pt["scheduler.budget"],
                                             "rate_per_s": rates[label], "step_time_scale": scale} | summary
                                            for (r, label, pt), scale, (summary, _)
                                            in zip(order, res.runs[column], result)]).assign(executor="simulated")
                runs.append(scaled_runs.assign(fit=f"probe + serving, {name}"))
                tables[name] = percentile_table(res.runs, scaled_runs.groupby("point", sort=False).median(
                    numeric_only=True).reset_index().assign(executor="simulated"))
                cond_lines[f"simulated ({name})"] = sim_conditions_line(scaled[0]) + (
                    f"; each repeat its own scale ({column}: {res.runs[column].min():.3f}-{res.runs[column].max():.3f})"
                    + (f", each reading over the sentinel's right after calibration, {sentinel.baseline_ratio:.3f}"
                       if column == "sentinel_ratio" else ""))
    drift = drift_table(res.runs, {"": errors["probe + serving"]} | {name: errors[name] for name in SCALED})
    steps = res.steps.assign(point=res.steps["run"].map(lambda i: labels[i]))
    step_err = step_errors(steps)
    paired["probe + serving"][["point", "metric", "median_rel_error", "p90_rel_error", "n"]].to_csv(
        out / "paired.csv", index=False, float_format="%.4g")
    floor = repeat_floor(res.requests)
    both = pd.concat([t.assign(fit=f) for f, t in paired.items()] + [floor.assign(fit="measured repeat vs repeat")])
    both.to_csv(out / "paired_before_after.csv", index=False, float_format="%.4g")
    table = tables["probe + serving"]
    table.to_csv(out / "fidelity.csv", index=False, float_format="%.6g")
    tables[SENTINEL].to_csv(out / "fidelity_sentinel_scaled.csv", index=False, float_format="%.6g")
    pd.concat(runs).to_csv(out / "runs.csv", index=False, float_format="%.6g")
    res.requests.drop(columns=["gaps_s"]).to_csv(out / "requests_measured.csv", index=False, float_format="%.6g")
    step_err.to_csv(out / "step_error.csv", index=False, float_format="%.4g")
    drift.to_csv(out / "drift.csv", index=False, float_format="%.4g")
    lines = {"measured": res.conditions[0]} | cond_lines
    (out / "conditions.json").write_text(json.dumps(lines, indent=2) + "\n")
    figures.fidelity(table[~table["point"].str.startswith("azure")], out / "fidelity.png")
    write_json(out / "metrics.json", metrics(paired["probe + serving"], table)
               | {f"{k} ({SENTINEL})": v for k, v in metrics(paired[SENTINEL], tables[SENTINEL]).items()})
    (OUTPUTS / "tables").mkdir(exist_ok=True)
    md = markdown(p, paired, floor, tables, step_err, drift, lines)
    (OUTPUTS / "tables" / "fidelity.md").write_text(md)
    print(md)


SENTINEL = "sentinel-scaled"
# simulation name -> the measured runs' column that scales its step times, repeat by repeat
SCALED = {SENTINEL: "sentinel_ratio", "own-step-ratio-scaled": "step_time_vs_predicted_p50"}


def sim_config(sim_base: list[str], pt: dict, rate_per_s: float, step_time_scale: float = 1.0):
    """A point's simulated run at the rate its measured runs resolved (not its load: capacity
    is the profile's, and a scaled profile has another)."""
    return compose_run_config(sim_base + [f"{k}={v}" for k, v in pt.items() if k != "workload.load"]
                              + ([f"workload.rate_per_s={rate_per_s}"] if "workload.load" in pt else [])
                              + ([f"hardware.step_time_scale={step_time_scale}"] if step_time_scale != 1.0 else []))


def percentile_table(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    return fidelity_table(pd.concat([measured.assign(executor="torch"), simulated]).assign(
        intensity=lambda d: d["point"])).rename(columns={"intensity": "point"})


def step_errors(steps: pd.DataFrame) -> pd.DataFrame:
    """Both fits scored on every measured step (no fit saw these runs): by step kind."""
    doc = json.loads((OUTPUTS / "profiles" / "machine.json").read_text())
    x = steps[[c for c in steps.columns if c.startswith("f_")]].to_numpy()
    frames = []
    for fit, part in (("probe only", "probe_only"), ("probe + serving", "model")):
        pred = x @ np.array(doc[part]["coefficients_s"])
        frames.append(step_error_table(steps.assign(predicted_s=pred)).assign(fit=fit))
        all_err = np.abs(steps["duration_s"].to_numpy() - pred) / steps["duration_s"].to_numpy()
        frames.append(pd.DataFrame([{"step kind": "all steps", "steps": len(steps), "fit": fit,
                                     "median_rel_error": float(np.median(all_err)),
                                     "p90_rel_error": float(np.percentile(all_err, 90)),
                                     "ratio_p50": float(np.median(steps["duration_s"] / pred)),
                                     "time_ratio": float(steps["duration_s"].sum() / pred.sum())}]))
    return pd.concat(frames, ignore_index=True)


def metrics(paired: pd.DataFrame, table: pd.DataFrame) -> dict:
    at = paired[paired["point"].str.contains("load 0.85|azure_conv")]
    return {"paired_median_rel_error_max_at_0.85_and_trace": round(float(at["median_rel_error"].max()), 4),
            "paired_p90_rel_error_max_at_0.85_and_trace": round(float(at["p90_rel_error"].max()), 4),
            "percentile_rows_meeting_goal": round(float(table["met"].mean()), 4)}


def markdown(p, paired, floor, tables, step_err, drift, lines) -> str:
    after, before, scaled = paired["probe + serving"], paired["probe only"], paired[SENTINEL]
    pb = after.merge(before, on=["point", "metric"], suffixes=("", " (probe only)"))
    pb = pb.merge(scaled[["point", "metric", "median_rel_error", "median_signed_error"]].rename(
        columns=lambda c: c if c in ("point", "metric") else f"{c} ({SENTINEL})"), on=["point", "metric"])
    pb = pb.merge(floor[["point", "metric", "median_rel_error"]].rename(
        columns={"median_rel_error": "median_rel_error (repeat vs repeat)"}), on=["point", "metric"], how="left")
    pb = pb[["point", "metric", "n", "median_rel_error", "p90_rel_error", "median_signed_error",
             "median_rel_error (probe only)", "median_signed_error (probe only)",
             f"median_rel_error ({SENTINEL})", f"median_signed_error ({SENTINEL})",
             "median_rel_error (repeat vs repeat)"]]
    table, table_scaled = tables["probe + serving"], tables[SENTINEL]
    at85 = table[table["point"].str.contains("load 0.85")]
    at85_scaled = table_scaled[table_scaled["point"].str.contains("load 0.85")]
    corr = lambda metric, ratio: drift_correlation(drift, metric, ratio)  # noqa: E731
    return "\n".join([
        "### Fidelity: simulated against measured", "",
        f"MEASURED points, each {p['repeats']} times (same seed: the machine's noise), against SIMULATED runs of the "
        "same requests with this machine's profile. Loads are of this machine's capacity (default scheduler, "
        "budget 512).", "",
        "Per request, paired by id: |simulated - measured| / measured, pooled over the repeats "
        f"(goal: median <= 5% at load 0.85 and on the trace). Columns \"(probe only)\": the same with the fit "
        "on probe shapes alone, before serving replays entered the fit. "
        f"\"({SENTINEL})\": each measured repeat against a simulation of its own whose every step time is the "
        "profile's times that repeat's speed sentinel (a short serving replay on the real engine just before "
        "and just after the repeat, over the same replay's reading right after calibration, "
        "experiments/sentinel.py; never the repeat's own steps). "
        "\"(repeat vs repeat)\": the same error between two measured repeats of the point, request by request: "
        "this machine's noise floor.", "",
        pb.to_markdown(index=False, floatfmt=".3f"), "",
        f"Percentiles against the repeats' median (goal met: within its goal, or inside the repeats' min-max): "
        f"{100 * table['met'].mean():.0f}% of {len(table)} rows; at load 0.85, "
        f"{100 * at85['met'].mean():.0f}% of {len(at85)}. {SENTINEL} (each percentile the median of the "
        f"repeats' own simulations): {100 * table_scaled['met'].mean():.0f}%; at load 0.85, "
        f"{100 * at85_scaled['met'].mean():.0f}%.", "",
        at85[["point", "metric", "real_median", "real_min", "real_max", "simulated", "rel_error", "goal", "met"]]
        .merge(at85_scaled[["point", "metric", "simulated", "rel_error", "met"]], on=["point", "metric"],
               suffixes=("", f" ({SENTINEL})")).to_markdown(index=False, floatfmt=".4g"), "",
        "Measured / predicted step time on every measured step, by step kind and fit:", "",
        step_err.to_markdown(index=False, floatfmt=".3f"), "",
        "Per measured repeat, in the order they ran (every point once, then again): the speed sentinel around "
        "it (geometric mean of the readings before and after), its own steps' median measured / predicted time, "
        "and the median signed per-request error of each simulation against it. The last columns scale the "
        "simulation by the repeat's own step ratio: not a prediction (it reads the run it is scored on), it shows "
        "what is left of the error once the machine's speed is known. "
        f"Correlation with the step ratio: TTFT {corr('ttft', 'step_time_vs_predicted_p50'):.2f}, TPOT "
        f"{corr('tpot', 'step_time_vs_predicted_p50'):.2f}; with the sentinel: TTFT "
        f"{corr('ttft', 'sentinel_ratio'):.2f}, TPOT {corr('tpot', 'sentinel_ratio'):.2f}.", "",
        drift.to_markdown(index=False, floatfmt=".3f"), "",
        *[f"{k.capitalize()}: {v}.\n" for k, v in lines.items()],
    ])


if __name__ == "__main__":
    main()
