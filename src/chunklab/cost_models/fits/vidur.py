"""The roofline's GEMM and elementwise efficiencies of one GPU preset, fit on Vidur's measured
operator times of Llama-2-7B on that device (data/profiles/vidur/, MIT; tensor-parallel degree 1).
One function for every device: `fit_vidur(model, hardware, path)` with the device's preset and its
operator times (H100 and A100 today; the same model on each, so two fits differ only by device).

Each operator is priced with cost_models/roofline.py's own formulas (gemm_s, elementwise_s) for the
composed model and hardware presets; the efficiencies are fit by least squares on log(predicted /
measured) over part of the token counts, and scored on the rest (every third count, held out):
the GEMMs per operator; the elementwise kernels on their sum per layer (what a step pays; one
shared bandwidth share cannot fit each kernel alone, and the per-kernel errors say so).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from chunklab.config import HardwareConfig, ModelConfig
from chunklab.cost_models.roofline import elementwise_s, gemm_s, layer_elementwise, layer_gemms
from chunklab.model.sizes import DTYPE_BYTES

VIDUR_DIR = Path("data/profiles/vidur")  # <device>_llama-2-7b-hf_mlp.csv, vendored unchanged
HELD_OUT_EVERY = 3  # token counts at sorted index i with i % 3 == 1 are held out
GEMM_PARAMS = ("gemm_max", "gemm_half_rows", "weight_bandwidth")
ELEMENTWISE_PARAMS = ("elementwise_bandwidth", "kernel_floor_s")
FIT_PARAMS = GEMM_PARAMS + ELEMENTWISE_PARAMS
DECODE_STEP_TOKENS = 256  # steps of at most this many tokens: decode-sized


@dataclass(frozen=True)
class VidurFit:
    efficiency: dict[str, float]  # the fitted RooflineEfficiency fields
    points: pd.DataFrame  # op, num_tokens, measured_ms, predicted_ms, held_out
    errors: pd.DataFrame  # op, split, median_rel_error, p90_rel_error, n


def read_operator_times(path: Path) -> pd.DataFrame:
    """Median ms per (op, num_tokens) at tensor-parallel degree 1."""
    raw = pd.read_csv(path)
    raw = raw[raw["num_tensor_parallel_workers"] == 1].sort_values("num_tokens").reset_index(drop=True)
    held = (np.arange(len(raw)) % HELD_OUT_EVERY) == 1
    rows = []
    for col in raw.columns:
        if col.startswith("time_stats.") and col.endswith(".median"):
            op = col.split(".")[1]
            rows += [{"op": op, "num_tokens": int(m), "measured_ms": float(t), "held_out": bool(h)}
                     for m, t, h in zip(raw["num_tokens"], raw[col], held)]
    return pd.DataFrame(rows)


def _with(hw: HardwareConfig, names: tuple[str, ...], values) -> HardwareConfig:
    eff = dataclasses.replace(hw.efficiency, **dict(zip(names, (float(v) for v in values))))
    return dataclasses.replace(hw, efficiency=eff)


def predict_ms(op: str, rows: np.ndarray, model: ModelConfig, hw: HardwareConfig) -> np.ndarray:
    peak, bw, b = hw.peak_dense_tflops[model.dtype] * 1e12, hw.memory_bandwidth_gb_per_s * 1e9, DTYPE_BYTES[model.dtype]
    gemms = {g.name: g for g in layer_gemms(model)}
    elems = dict(layer_elementwise(model))
    if op in gemms:
        g = gemms[op]
        return np.array([gemm_s(m, g.k, g.n, peak, bw, hw.efficiency, b) for m in rows]) * 1e3
    return np.array([elementwise_s(m, elems[op], bw, hw.efficiency, b) for m in rows]) * 1e3


def _fit(residuals_of, names, x0, bounds, hw) -> HardwareConfig:
    found = least_squares(lambda values: residuals_of(_with(hw, names, values)), x0, bounds=bounds, x_scale="jac")
    return _with(hw, names, found.x)


def with_predictions(data: pd.DataFrame, model: ModelConfig, hw: HardwareConfig) -> pd.DataFrame:
    """Every modelled operator's rows with predicted_ms, plus two sums per token count: the layer's
    elementwise kernels and the whole layer, each kernel as often as a layer runs it (two adds)."""
    counts = pd.Series([name for name, _ in layer_elementwise(model)]).value_counts().to_dict()
    counts |= {g.name: 1 for g in layer_gemms(model)}
    data = data[data["op"].isin(counts)].copy()
    data["predicted_ms"] = 0.0
    for op, g in data.groupby("op"):
        data.loc[g.index, "predicted_ms"] = predict_ms(op, g["num_tokens"].to_numpy(), model, hw)
    gemms = {g.name for g in layer_gemms(model)}
    sums = []
    for label, ops in (("elementwise (layer sum)", set(counts) - gemms), ("layer (sum)", set(counts))):
        part = data[data["op"].isin(ops)].assign(w=lambda d: d["op"].map(counts))
        total = (part.assign(measured_ms=part["measured_ms"] * part["w"], predicted_ms=part["predicted_ms"] * part["w"])
                 .groupby(["num_tokens", "held_out"], as_index=False)[["measured_ms", "predicted_ms"]].sum())
        sums.append(total.assign(op=label))
    return pd.concat([data, *sums], ignore_index=True)[["op", "num_tokens", "held_out", "measured_ms", "predicted_ms"]]


def fit_vidur(model: ModelConfig, hw: HardwareConfig, path: Path) -> VidurFit:
    """Fit hw's GEMM and elementwise efficiencies on the operator times at `path`, measured on the
    device hw describes (its spec sheet's peak and bandwidth are what the shares are of)."""
    data = read_operator_times(path)
    train = data[~data["held_out"]]
    gemm_ops = [g.name for g in layer_gemms(model)]

    def gemm_residuals(h):
        return np.concatenate([np.log(predict_ms(op, g["num_tokens"].to_numpy(), model, h) / g["measured_ms"].to_numpy())
                               for op, g in train[train["op"].isin(gemm_ops)].groupby("op")])

    def elementwise_residuals(h):
        total = with_predictions(train, model, h)
        total = total[total["op"] == "elementwise (layer sum)"]
        return np.log(total["predicted_ms"].to_numpy() / total["measured_ms"].to_numpy())

    hw = _fit(gemm_residuals, GEMM_PARAMS, [0.7, 64.0, 0.7], ([0.05, 0.0, 0.05], [1.0, 4096.0, 1.0]), hw)
    hw = _fit(elementwise_residuals, ELEMENTWISE_PARAMS, [0.5, 4e-6], ([0.01, 0.0], [1.0, 1e-4]), hw)
    data = with_predictions(data, model, hw)
    data["rel_error"] = (data["predicted_ms"] - data["measured_ms"]).abs() / data["measured_ms"]
    errors = (data.assign(split=np.where(data["held_out"], "held out", "fit"))
              .groupby(["op", "split"], sort=False)["rel_error"]
              .agg(median_rel_error="median", p90_rel_error=lambda e: float(np.percentile(e, 90)), n="size")
              .reset_index())
    eff = {k: float(getattr(hw.efficiency, k)) for k in FIT_PARAMS}
    return VidurFit(eff, data.drop(columns="rel_error").reset_index(drop=True), errors)


def with_efficiency(hw: HardwareConfig, efficiency: dict[str, float]) -> HardwareConfig:
    """hw with the fitted fields of `efficiency` (another fit's, to price one device by another's shares)."""
    return _with(hw, FIT_PARAMS, [efficiency[k] for k in FIT_PARAMS])


def step_error(data: pd.DataFrame, model: ModelConfig, hw: HardwareConfig,
               max_tokens: int = DECODE_STEP_TOKENS) -> dict[str, float]:
    """A whole layer's signed relative error (predicted / measured - 1; > 0: too slow) over every
    token count up to max_tokens, fit and held-out alike: how far off a decode-sized step is."""
    layer = with_predictions(data[data["num_tokens"] <= max_tokens], model, hw).query("op == 'layer (sum)'")
    e = layer["predicted_ms"].to_numpy() / layer["measured_ms"].to_numpy() - 1.0
    return {"median_rel_error": float(np.median(e)), "min_rel_error": float(e.min()),
            "max_rel_error": float(e.max()), "n": int(len(e))}
