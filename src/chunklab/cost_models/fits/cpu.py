"""The roofline form fit on this CPU: TinyGPT's calibration probe (the shape table of this repro's
profile, outputs/profiles/machine_shapes.csv), beside the linear profile fit on the same shapes.

A CPU has no spec sheet here, so the "device" is 1 TFLOP/s and 1 TB/s: each fitted efficiency is
then the rate the machine reached (gemm_max 0.18 = 180 GFLOP/s). Fit on the probe's mixed-batch
shapes that the profile fit used, scored on the shapes it held out; same split for both forms.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from chunklab.cost_models.fits.profile import fit_linear
from chunklab.config import HardwareConfig, ModelConfig, RooflineEfficiency
from chunklab.cost_models.roofline import RooflineCostModel
from chunklab.cost_models.step_shape import FEATURES

UNIT_DEVICE = HardwareConfig(name="cpu (unit device)", cost_model="roofline", peak_dense_tflops={"float32": 1.0},
                             memory_bandwidth_gb_per_s=1000.0)
PARAMS = ("gemm_max", "gemm_half_rows", "weight_bandwidth", "elementwise_bandwidth", "kernel_floor_s",
          "attention_prefill", "attention_decode_bandwidth", "step_overhead_s")
START = (0.1, 16.0, 0.05, 0.02, 1e-5, 0.05, 0.02, 1e-3)
BOUNDS = ((1e-4, 0.0, 1e-4, 1e-4, 0.0, 1e-4, 1e-4, 0.0), (10.0, 8192.0, 10.0, 10.0, 1e-2, 10.0, 10.0, 0.1))


def model_with(model: ModelConfig, values) -> RooflineCostModel:
    eff = RooflineEfficiency(**dict(zip(PARAMS, (float(v) for v in values))), source="fit on the CPU probe")
    return RooflineCostModel(model, dataclasses.replace(UNIT_DEVICE, efficiency=eff), "cpu-fit")


def _rel_errors(pred: np.ndarray, y: np.ndarray) -> dict:
    e = np.abs(pred - y) / y
    return {"median_rel_error": float(np.median(e)), "p90_rel_error": float(np.percentile(e, 90)), "n": int(len(e))}


def fit_cpu(model: ModelConfig, path: Path) -> tuple[dict, pd.DataFrame]:
    """The fitted efficiencies (rates on the unit device) and the held-out errors of both forms."""
    shapes = pd.read_csv(path)
    shapes = shapes[shapes["mixed_batch"].astype(bool)].reset_index(drop=True)
    x, y = shapes[list(FEATURES)].to_numpy(float), shapes["measured_s"].to_numpy(float)
    train, test = ~shapes["held_out"].astype(bool).to_numpy(), shapes["held_out"].astype(bool).to_numpy()

    def predict(values, rows):
        cm = model_with(model, values)
        return np.array([cm.predict_features(list(r)) for r in x[rows]])

    found = least_squares(lambda v: np.log(predict(v, train) / y[train]), START, bounds=BOUNDS, x_scale="jac")
    linear = fit_linear(x[train], y[train])
    errors = pd.DataFrame([
        {"form": "roofline (8 efficiencies)", "split": split} | _rel_errors(predict(found.x, rows), y[rows])
        for split, rows in (("fit", train), ("held out", test))] + [
        {"form": f"linear ({len(FEATURES)} coefficients)", "split": split} | _rel_errors(x[rows] @ linear, y[rows])
        for split, rows in (("fit", train), ("held out", test))])
    return dict(zip(PARAMS, (float(v) for v in found.x))), errors
