"""Calibrate: profile shapes on the real engine, fit, and assemble the profile document."""
from __future__ import annotations

import time
from dataclasses import dataclass

from chunklab.calibration.fit import FitResult, compare, refit_all
from chunklab.calibration.probe import profile_shapes
from chunklab.calibration.shapes import calibration_shapes
from chunklab.config import RunConfig
from chunklab.engine.cost_model import PROFILE_FORMAT, applies_to
from chunklab.engine.step_shape import FEATURES, StepShape
from chunklab.metrics.conditions import conditions
from chunklab.model.sizes import num_parameters

CONDITION_KEYS = ("cpu_model", "cpu_arch", "cpu_logical_cores", "memory_gb", "device", "torch_version", "torch_build",
                  "torch_threads", "python", "os", "model", "model_params", "dtype", "git_commit", "git_dirty",
                  "measured_at", "forward_path")


@dataclass
class Calibration:
    shapes: list[StepShape]
    times_s: list[float]
    results: dict[str, FitResult]
    profile: dict  # the document a CostModel reads


def calibrate(cfg: RunConfig, seed: int, num_random_shapes: int, rounds: int, burst: int,
              held_out_share: float) -> Calibration:
    shapes = calibration_shapes(seed, num_random_shapes, cfg.scheduler.max_num_seqs, cfg.model.max_seq_len)
    t0 = time.perf_counter()
    times, forward_path = profile_shapes(cfg.model, cfg.engine, shapes, rounds, burst)
    profiling_s = time.perf_counter() - t0
    results = compare(shapes, times, held_out_share, seed)
    better = min(results.values(), key=lambda r: (r.median_rel_error, r.p90_rel_error))
    cond = conditions(cfg, num_parameters(cfg.model), forward_path=forward_path)
    profile = {
        "format": PROFILE_FORMAT,
        "applies_to": applies_to(cfg.model, cfg.engine),
        # The stored form is linear (plain numbers, microseconds to evaluate); `compared`
        # says how it did against the forest on the same held-out shapes.
        "model": {"form": "linear", "features": list(FEATURES), "coefficients_s": refit_all(shapes, times)},
        "held_out": results["linear"].summary() | {"share": held_out_share, "seed": seed},
        "compared": {name: r.summary() for name, r in results.items()},
        "better_form": better.form,
        "shapes": {"num_shapes": len(shapes), "rounds": rounds, "burst": burst, "statistic": "median",
                   "profiling_s": round(profiling_s, 1)},
        "conditions": {k: cond[k] for k in CONDITION_KEYS},
    }
    return Calibration(shapes, times, results, profile)
