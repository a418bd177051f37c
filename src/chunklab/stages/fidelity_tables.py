"""The fidelity stage's tables: percentiles, per-step errors, its metrics and its markdown."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.engine.cost_models.linear import LinearCostModel, probe_only, read_profile
from chunklab.engine.step_log import FEATURE_PREFIX
from chunklab.engine.step_shape import FEATURES
from chunklab.report.fidelity import drift_correlation, fidelity_table, step_error_table
from chunklab.stages.params import FidelityParams

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


def metrics(paired: pd.DataFrame, table: pd.DataFrame) -> dict:
    at = paired[paired["point"].str.contains("load 0.85|azure_conv")]
    return {"paired_median_rel_error_max_at_0.85_and_trace": round(float(at["median_rel_error"].max()), 4),
            "paired_p90_rel_error_max_at_0.85_and_trace": round(float(at["p90_rel_error"].max()), 4),
            "percentile_rows_meeting_goal": round(float(table["met"].mean()), 4)}


def markdown(p: FidelityParams, paired: dict, floor: pd.DataFrame, tables: dict, step_err: pd.DataFrame,
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
    return "\n".join([
        "### Fidelity: simulated against measured", "",
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
