"""Calibrate: profile shapes and serve replays on the real engine, fit, assemble the profile.

The stored model is the linear form fit on both: probe shapes (every kind of step, each
timed after its lead-in) and serving replays (steps as a serving loop runs them). Its error
is scored on what the fit did not see: held-out shapes and held-out replays. The probe-only
fit is kept beside it (`probe_only`), so every report can say what the serving steps changed.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from chunklab.calibration.fingerprint import describe, fingerprint, fingerprint_id
from chunklab.cost_models.fits.profile import (FitResult, compare, fit_linear, fit_probe_and_serving, refit_all, rel_errors,
                                      split)
from chunklab.calibration.probe import profile_shapes
from chunklab.calibration.sentinel import SpeedSentinel
from chunklab.calibration.serving import REPLAYS, ServingSteps, replay_workload, serving_steps
from chunklab.calibration.shapes import calibration_shapes
from chunklab.config import EngineConfig, ModelConfig, RunConfig, SchedulerConfig
from chunklab.cost_models.linear import PROFILE_FORMAT, LinearCostModel, applies_to
from chunklab.cost_models.step_shape import FEATURES, StepShape
from chunklab.metrics.conditions import conditions
from chunklab.model.sizes import num_parameters

CONDITION_KEYS = ("cpu_model", "cpu_arch", "cpu_logical_cores", "memory_gb", "device", "torch_version", "torch_build",
                  "torch_threads", "python", "os", "model", "model_params", "dtype", "git_commit", "git_dirty",
                  "measured_at", "forward_path")
HELD_OUT_REPLAYS = (1, 3, 5)  # fit on the other replays, score on these (serving.REPLAYS: one of each kind)
SENTINEL_BASELINE_READS = 3  # their median is the profile's sentinel baseline (calibration/sentinel.py)
# Decode rows of the largest probe shapes: the default scheduler's limit on running sequences, whatever
# a run asks for (a profile is the machine's, not one run's).
MAX_DECODE_ROWS = SchedulerConfig().max_num_seqs
# The compute path a profile is measured on: copied from the run's engine; everything else
# (pool size, clock, batching, sampling) is calibration's own.
COMPUTE_PATH_KEYS = ("device", "threads", "compile", "linear_library", "prefill_attention", "block_size")


@dataclass(frozen=True)
class CalibrationSettings:
    """How much to measure (params.yaml `calibrate` for the DVC stage; these defaults for
    engine.profile=auto, about two minutes for TinyGPT on 2 cores)."""
    seed: int = 0
    num_random_shapes: int = 300
    rounds: int = 2
    burst: int = 3
    held_out_share: float = 0.25
    replay_requests: int = 40  # requests per serving replay (calibration/serving.py REPLAYS)

    @classmethod
    def smoke(cls) -> "CalibrationSettings":
        """Seconds, not minutes: tests of the calibration path (CHUNKLAB_CALIBRATION=smoke)."""
        return cls(num_random_shapes=12, rounds=1, burst=2, replay_requests=4)


@dataclass
class Calibration:
    shapes: list[StepShape]
    times_s: list[float]
    serving: ServingSteps
    results: dict[str, FitResult]
    profile: dict  # the document a CostModel reads


def calibration_engine(model: ModelConfig, engine: EngineConfig, shapes: list[StepShape]) -> EngineConfig:
    """The engine calibration measures: the run's compute path (COMPUTE_PATH_KEYS) on a real executor
    and replay clock, with a KV pool that holds the largest probe shape and a full batch of the
    serving replays' longest requests, whatever pool the run itself asked for."""
    path = {k: getattr(engine, k) for k in COMPUTE_PATH_KEYS}

    def blocks(tokens: int) -> int:
        return -(-tokens // engine.block_size)

    largest_shape = max((sum(blocks(c) for c in sh.decode_ctx_lens)
                         + sum(blocks(g.num_cached + g.num_tokens) for g in sh.segments) for sh in shapes), default=0)
    w = replay_workload(model, 1, 1.0, 0)
    longest_request = max(c.max_tokens for c in w.classes) + w.max_output_tokens
    num_blocks = max(EngineConfig().num_blocks, largest_shape, MAX_DECODE_ROWS * blocks(longest_request))
    return EngineConfig(executor="torch", profile=engine.profile, clock="replay", num_blocks=num_blocks, **path)


def calibrate(model: ModelConfig, engine: EngineConfig, s: CalibrationSettings,
              show_progress: bool | None = False) -> Calibration:
    """Profiles this machine's engine for `model` on `engine`'s compute path (never the run's pool or
    scheduler settings). show_progress None: a progress bar on a terminal only (tqdm's rule)."""
    shapes = calibration_shapes(s.seed, s.num_random_shapes, MAX_DECODE_ROWS, model.max_seq_len)
    cfg = RunConfig(model=model, engine=calibration_engine(model, engine, shapes))
    total = s.rounds * len(shapes) + len(REPLAYS) * s.replay_requests
    with tqdm(total=total, desc="calibrating", unit="step", disable=not show_progress, leave=False) as bar:
        t0 = time.perf_counter()
        times, forward_path = profile_shapes(cfg.model, cfg.engine, shapes, s.rounds, s.burst, bar.update)
        profiling_s = time.perf_counter() - t0
        serving = serving_steps(cfg.model, cfg.engine, s.replay_requests, bar.update)
        serving_s = time.perf_counter() - t0 - profiling_s
    results = compare(shapes, times, s.held_out_share, s.seed)
    held_serving, coef, probe_coef, trimmed = fit_with_serving(shapes, times, serving, s)
    better = min(results.values(), key=lambda r: (r.median_rel_error, r.p90_rel_error))
    cond = conditions(cfg, num_parameters(cfg.model), forward_path=forward_path)
    fp = fingerprint(cfg.model, cfg.engine)
    profile = {
        "format": PROFILE_FORMAT,
        "fingerprint": fp,
        "fingerprint_id": fingerprint_id(fp),
        "machine": describe(fp),
        "applies_to": applies_to(cfg.model, cfg.engine),
        # Plain numbers, microseconds to evaluate. `probe_only` is the same form fit on the probe alone.
        "model": {"form": "linear", "fit_on": fit_on(trimmed, len(serving.duration_s)), "features": list(FEATURES),
                  "coefficients_s": coef},
        "probe_only": {"form": "linear", "fit_on": "probe shapes", "features": list(FEATURES),
                       "coefficients_s": probe_coef},
        # The error a run's steps see: serving steps of replays the fit left out.
        "held_out": held_serving["probe + serving"] | {"on": f"serving steps of replays {list(HELD_OUT_REPLAYS)}"},
        "held_out_serving": held_serving,
        "held_out_shapes": results["linear"].summary() | {"share": s.held_out_share, "seed": s.seed},
        "compared": {name: r.summary() for name, r in results.items()},
        "better_form": better.form,
        "settings": dataclasses.asdict(s),
        "shapes": {"num_shapes": len(shapes), "rounds": s.rounds, "burst": s.burst, "statistic": "median",
                   "profiling_s": round(profiling_s, 1)},
        "serving": {"replays": [{"budget": b, "rate_per_s": r} for b, r in REPLAYS],
                    "requests_per_replay": s.replay_requests, "steps": int(len(serving.duration_s)),
                    "stalled_steps_left_out": trimmed, "serving_s": round(serving_s, 1)},
        "conditions": {k: cond[k] for k in CONDITION_KEYS},
    }
    profile["sentinel"] = sentinel_baseline(cfg.model, cfg.engine, profile)
    return Calibration(shapes, times, serving, results, profile)


def sentinel_baseline(model: ModelConfig, engine: EngineConfig, profile: dict) -> dict:
    """What the speed sentinel reads against this profile on the machine as just calibrated: later
    readings are taken over it (calibration/sentinel.py says why it is not 1)."""
    sentinel = SpeedSentinel(model, engine, LinearCostModel.from_profile(profile))
    readings = [sentinel.read().raw_ratio for _ in range(SENTINEL_BASELINE_READS)]
    return {"baseline_ratio": statistics.median(readings), "readings": readings, "num_requests": sentinel.num_requests,
            "statistic": f"median of {SENTINEL_BASELINE_READS} readings right after the fit"}


def fit_on(stalled_steps: int, serving_steps: int) -> str:
    """What the stored coefficients were fit on: a calibration whose every serving step stalled
    keeps the probe-only fit, and says so."""
    if serving_steps and stalled_steps == serving_steps:
        return "probe shapes (every serving step stalled: none kept)"
    return "probe shapes + serving replays"


def fit_with_serving(shapes, times, serving: ServingSteps, s: CalibrationSettings):
    """Held-out errors on serving steps (probe-only fit vs probe + serving, both fit on the training
    shapes and replays), then the stored coefficients refit on everything."""
    x = np.array([sh.features() for sh in shapes])
    y = np.array(times)
    train, _ = split(len(shapes), s.held_out_share, s.seed)
    test_rows = np.isin(serving.replay, HELD_OUT_REPLAYS)
    sx, sy = serving.features, serving.duration_s
    probe_coef = fit_linear(x[train], y[train])
    both_coef, _ = fit_probe_and_serving(x[train], y[train], sx[~test_rows], sy[~test_rows], serving.replay[~test_rows])
    held = {name: FitResult("linear", None, rel_errors(sx[test_rows] @ c, sy[test_rows])).summary()
            | {"median_ratio": float(np.median(sy[test_rows] / (sx[test_rows] @ c)))}
            for name, c in (("probe only", probe_coef), ("probe + serving", both_coef))}
    coef, trimmed = fit_probe_and_serving(x, y, sx, sy, serving.replay)
    return held, [float(c) for c in coef], refit_all(shapes, times), trimmed
