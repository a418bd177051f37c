"""The fidelity stage's tables: percentiles, per-step errors, its metrics and its markdown."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.cost_models.linear import LinearCostModel, probe_only, read_profile
from chunklab.engine.step_log import FEATURE_PREFIX
from chunklab.cost_models.step_shape import FEATURES
from chunklab.experiments.fidelity import drift_correlation, fidelity_table, step_error_table


SENTINEL = "sentinel-scaled"
# simulation name -> the measured runs' column that scales its step times, repeat by repeat
SCALED = {SENTINEL: "sentinel_ratio", "own-step-ratio-scaled": "step_time_vs_predicted_p50"}


def percentile_table(measured: pd.DataFrame, simulated: pd.DataFrame) -> pd.DataFrame:
    return fidelity_table(pd.concat([measured.assign(executor="torch"), simulated]).assign(
        intensity=lambda d: d["point"])).rename(columns={"intensity": "point"})


def step_errors(steps: pd.DataFrame, profile: Path) -> pd.DataFrame:
    """Both fits of the profile at path `profile` scored on every measured step (no fit saw these
    runs): by step kind."""
    doc, _ = read_profile(profile)
    x = steps[[FEATURE_PREFIX + name for name in FEATURES]].to_numpy()
    frames = []
    for fit, fit_doc in (("probe only", probe_only(doc)), ("probe + serving", doc)):
        model = LinearCostModel.from_profile(fit_doc)  # the cost model's own prediction, not a copy of it
        pred = np.array([model.predict_features(row) for row in x])
        frames.append(step_error_table(steps.assign(predicted_s=pred)).assign(fit=fit))
        all_err = np.abs(steps["duration_s"].to_numpy() - pred) / steps["duration_s"].to_numpy()
        frames.append(pd.DataFrame([{"step kind": "all steps", "steps": len(steps), "fit": fit,
                                     "median_rel_error": float(np.median(all_err)),
                                     "p90_rel_error": float(np.percentile(all_err, 90)),
                                     "ratio_p50": float(np.median(steps["duration_s"] / pred)),
                                     "time_ratio": float(steps["duration_s"].sum() / pred.sum())}]))
    return pd.concat(frames, ignore_index=True)


ABSOLUTE_GOAL = 0.05  # the paired median error the simulation aims at, whatever the machine's noise


def against_floor(paired: pd.DataFrame, floor: pd.DataFrame) -> pd.DataFrame:
    """Per point and metric: the paired median error, the repeat-vs-repeat floor, their ratio (at or
    under 1: the simulation is as close to a run as another run is), and the absolute goal met or not."""
    t = paired[["point", "metric", "median_rel_error"]].merge(
        floor[["point", "metric", "median_rel_error"]].rename(columns={"median_rel_error": "floor"}),
        on=["point", "metric"], how="left")
    return t.assign(error_over_floor=t["median_rel_error"] / t["floor"],
                    goal_5pct_met=t["median_rel_error"] <= ABSOLUTE_GOAL)


def metrics(paired: pd.DataFrame, table: pd.DataFrame, floor: pd.DataFrame) -> dict:
    at = paired[paired["point"].str.contains("load 0.85|azure_conv")]
    ratio = against_floor(paired, floor)
    return {"paired_median_error_max": round(float(at["median_rel_error"].max()), 4),  # at load 0.85 and the trace
            "paired_p90_error_max": round(float(at["p90_rel_error"].max()), 4),
            "percentile_rows_meeting_goal": round(float(table["met"].mean()), 4),
            "error_over_floor_max": round(float(ratio["error_over_floor"].max()), 4),
            "points_at_or_under_floor": round(float((ratio["error_over_floor"] <= 1).mean()), 4)}


def floor_table(paired: pd.DataFrame, floor: pd.DataFrame) -> str:
    """The section's headline: error / floor per point, one column per metric."""
    ratio = against_floor(paired, floor)
    columns = {"median_rel_error": "error", "floor": "floor", "error_over_floor": "error / floor"}
    wide = ratio.pivot(index="point", columns="metric", values=list(columns))
    order = [(k, m) for m in dict.fromkeys(ratio["metric"]) for k in columns]
    wide = wide[order].reindex(list(dict.fromkeys(ratio["point"])))
    wide.columns = [f"{m} {columns[k]}" for k, m in order]
    return wide.reset_index().to_markdown(index=False, floatfmt=".3f")


def markdown(p: "fidelity.FidelityParams", paired: dict, floor: pd.DataFrame, tables: dict, step_err: pd.DataFrame,
             drift: pd.DataFrame, lines: dict) -> str:
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
    ratio = against_floor(after, floor)
    return "\n".join([
        "### Fidelity: simulated against measured", "",
        "Headline: each point's paired median error of simulated against measured (per request, paired by id), "
        "beside the floor, the same error between two measured repeats of the same requests: this machine's "
        "noise. error / floor at or under 1: the simulation is as close to a run as a rerun is. "
        f"{(ratio['error_over_floor'] <= 1).sum()} of {len(ratio)} (point, metric) pairs are at or under their "
        f"floor; {ratio['goal_5pct_met'].sum()} of {len(ratio)} meet the absolute goal of a median error of "
        f"{100 * ABSOLUTE_GOAL:.0f}% or less, and every floor above 5% says why a miss is no surprise.", "",
        floor_table(after, floor), "",
        f"MEASURED points, each {p.repeats} times (same seed: the machine's noise), against SIMULATED runs of the "
        "same requests with this machine's profile. Loads are of this machine's capacity (default scheduler, "
        "budget 512).", "",
        "Per request, paired by id: |simulated - measured| / measured, pooled over the repeats "
        f"(goal: median <= 5% at load 0.85 and on the trace). Columns \"(probe only)\": the same with the fit "
        "on probe shapes alone, before serving replays entered the fit. "
        f"\"({SENTINEL})\": each measured repeat against a simulation of its own whose every step time is the "
        "profile's times that repeat's speed sentinel (a short serving replay on the real engine just before "
        "and just after the repeat, over the same replay's reading right after calibration, "
        "calibration/sentinel.py; never the repeat's own steps). "
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
