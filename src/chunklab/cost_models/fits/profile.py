"""Fits step-cost models on profiled shapes and scores them on held-out shapes.

Two forms are compared, as Vidur does for GPUs:
- linear: non-negative least squares on the work features (FEATURES), weighted
  so it minimises relative error (a 2 ms step matters as much as a 200 ms one);
- forest: a random forest on the same features, predicting log duration.
The better held-out error wins. Only the linear form can be stored in the
profile as plain numbers; if the forest wins, that is reported, not hidden.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from chunklab.cost_models.step_shape import StepShape


@dataclass
class FitResult:
    form: str
    coefficients_s: list[float] | None  # linear form only
    rel_errors: list[float]  # |pred - measured| / measured on the held-out shapes

    @property
    def median_rel_error(self) -> float:
        return float(np.median(self.rel_errors))

    @property
    def p90_rel_error(self) -> float:
        return float(np.percentile(self.rel_errors, 90))

    def summary(self) -> dict:
        return {"median_rel_error": self.median_rel_error, "p90_rel_error": self.p90_rel_error,
                "max_rel_error": float(max(self.rel_errors)), "num_shapes": len(self.rel_errors)}


def split(n: int, held_out_share: float, seed: int) -> tuple[list[int], list[int]]:
    idx = list(range(n))
    random.Random(seed).shuffle(idx)
    cut = int(round(n * held_out_share))
    return sorted(idx[cut:]), sorted(idx[:cut])


def fit_linear(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Non-negative coefficients minimising sum(w * ((x @ c - y) / y) ** 2)."""
    root_w = np.ones_like(y) if weights is None else np.sqrt(weights)
    coef, _ = nnls(x / y[:, None] * root_w[:, None], root_w)
    return coef


STALL_RATIO = 2.0  # a serving step over 2x the probe fit's prediction is a stall of the machine (noise guard)


def fit_probe_and_serving(probe_x: np.ndarray, probe_y: np.ndarray, serve_x: np.ndarray, serve_y: np.ndarray,
                          replay: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """The linear form fit on probe shapes and serving steps, each set carrying half the weight
    (a replay has ~10x more steps than the probe has shapes, all of a few kinds). Within the
    serving half each replay (`replay`: which one each step came from) weighs the same: a
    replay of full batches runs few long steps, one of light load many short ones, and the
    full batches are where capacity is decided. Serving steps the machine stalled (over
    STALL_RATIO x the probe-only fit) are left out. Returns the coefficients and how many
    steps were left out; when every step stalled (a machine busy throughout the replays) there
    is nothing to weigh, and the probe-only coefficients come back with every step left out."""
    probe_coef = fit_linear(probe_x, probe_y)
    keep = serve_y <= STALL_RATIO * (serve_x @ probe_coef)
    if not keep.any():
        return probe_coef, len(serve_y)
    replay = (np.zeros(len(serve_y), dtype=int) if replay is None else np.asarray(replay))[keep]
    ids, counts = np.unique(replay, return_counts=True)
    per_step = dict(zip(ids, 0.5 / len(ids) / counts))
    x = np.concatenate([probe_x, serve_x[keep]])
    y = np.concatenate([probe_y, serve_y[keep]])
    w = np.concatenate([np.full(len(probe_y), 0.5 / len(probe_y)), [per_step[r] for r in replay]])
    return fit_linear(x, y, w * len(y)), int((~keep).sum())


def fit_forest(x: np.ndarray, y: np.ndarray, seed: int):
    from sklearn.ensemble import RandomForestRegressor

    return RandomForestRegressor(n_estimators=200, min_samples_leaf=2, random_state=seed).fit(x, np.log(y))


def rel_errors(pred: np.ndarray, y: np.ndarray) -> list[float]:
    return [float(e) for e in np.abs(pred - y) / y]


def compare(shapes: list[StepShape], times_s: list[float], held_out_share: float, seed: int) -> dict[str, FitResult]:
    x = np.array([s.features() for s in shapes])
    y = np.array(times_s)
    train, test = split(len(shapes), held_out_share, seed)
    coef = fit_linear(x[train], y[train])
    forest = fit_forest(x[train], y[train], seed)
    return {
        "linear": FitResult("linear", [float(c) for c in coef], rel_errors(x[test] @ coef, y[test])),
        "forest": FitResult("forest", None, rel_errors(np.exp(forest.predict(x[test])), y[test])),
    }


def refit_all(shapes: list[StepShape], times_s: list[float]) -> list[float]:
    """The stored coefficients: the linear form refitted on every shape (held-out error
    was measured before, on the split)."""
    x = np.array([s.features() for s in shapes])
    return [float(c) for c in fit_linear(x, np.array(times_s))]

