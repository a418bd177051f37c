"""A speed sentinel: how fast this machine runs now, against its profile.

A shared VM's speed drifts: on the 2-core AMD EPYC VM that ran the fidelity stage of
2026-12-01, measured serving steps ran 1.03-1.33x the profile's predictions from one run to
the next, ten minutes after calibration had measured 1.009 on the same kind of steps, and
the simulation's per-request error followed that ratio (correlation -0.81 for TPOT). The
sentinel reads the speed between measured runs: a short serving replay of calibration's own
kind (the chapter's mix at budget 512, calibration/serving.py), every request queued at once
as in calibration's bursts, so batches run full as near capacity. Its ratio is the
time-weighted median of its steps' measured / predicted time: the ratio of the step that holds
the middle predicted second. A reading is that ratio over the one calibration took right after
its fit (the profile's `sentinel.baseline_ratio`), so it is 1 on the machine as it was
calibrated; a simulation scaled by it (hardware.step_time_scale) predicts the machine as it
runs now, and says so in its conditions.

Why a baseline. The profile is fit on probe shapes and replays of several kinds, and it misses
each kind of step by a few percent, each its own way; the sentinel's mix of steps weighs those
misses its own way. Measured on the Intel Xeon VM (2026-12-05 09:26 and 09:27 UTC, two fresh
calibrations with the stage's settings, each read four times straight after): 0.937-0.940 and
0.955-0.959, not 1. Until then the readings were used as they came, so every sentinel-scaled
simulation ran ~5% fast from the start.

Why full batches and time weights. Measured on the Intel Xeon VM (2026-12-05 06:39-06:46 UTC),
a sentinel of 24 requests at 8/s (95% of its steps small decodes) read 0.97-1.06 as the median
of its steps while a ch10 run at 22.2 req/s (b512, saturated) right after it ran 1.11-1.14x its
prediction in sum; time-weighted, that sentinel read 1.055-1.071. The same 24 requests queued at
once read 1.088-1.106 time-weighted against the saturated runs' 1.103-1.105 (their sum
1.117-1.119), and 1.075-1.116 beside runs at 11.3 req/s that read 1.083-1.094. A median weighted
by predicted time, not the sum: one stall in a one-second replay would move a sum by several
percent.

The replay is not the measured run: the ratio never looks at the steps it is used to predict.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from chunklab.calibration.serving import BURST_RATE_PER_S, REPLAY_SEED, replay_workload
from chunklab.config import EngineConfig, ModelConfig, SchedulerConfig
from chunklab.engine.build import build_engine
from chunklab.cost_models import CostModel
from chunklab.cost_models.linear import load_cost_model, profile_path, read_profile
from chunklab.engine.replay import replay
from chunklab.workload.synthetic import synthetic_requests

SENTINEL_BUDGET_TOKENS = 512
SENTINEL_RATE_PER_S = BURST_RATE_PER_S  # every request queued at once (see above)
SENTINEL_SEED = REPLAY_SEED + 100  # apart from calibration's replays: not a step the fit saw


def time_weighted_median(ratios, weights) -> float:
    """The ratio at the middle of the weights' total: of the steps sorted by ratio, that of the
    step holding the middle predicted second (weights: predicted seconds, all > 0)."""
    pairs = sorted(zip(ratios, weights))
    half, total = sum(weights) / 2, 0.0
    for ratio, weight in pairs:
        total += weight
        if total >= half:
            return float(ratio)
    raise ValueError("time_weighted_median of no steps")


def geometric_mean(values) -> float:
    values = list(values)
    return float(statistics.geometric_mean(values)) if values else float("nan")


def baseline_of(profile: dict) -> float:
    """What the sentinel read against this profile right after its fit; 1 for a profile from before
    calibration recorded it."""
    return float(profile.get("sentinel", {}).get("baseline_ratio", 1.0))


@dataclass(frozen=True)
class SentinelReading:
    ratio: float  # raw_ratio / the profile's baseline: this machine's speed now against its calibrated one
    raw_ratio: float  # time-weighted median over the replay's steps of measured / predicted seconds
    num_steps: int
    duration_s: float  # the replay's compute time


class SpeedSentinel:
    """One model and KV pool, built once; read() replays the same requests each time."""

    def __init__(self, model: ModelConfig, engine: EngineConfig, cost_model: CostModel, num_requests: int = 24,
                 baseline_ratio: float = 1.0):
        if not baseline_ratio > 0:
            raise ValueError(f"sentinel baseline_ratio={baseline_ratio!r}: must be > 0")
        self.model, self.cost_model, self.baseline_ratio = model, cost_model, baseline_ratio
        self.num_requests = num_requests
        self.engine_cfg = dataclasses.replace(engine, executor="torch", clock="replay")
        self.workload = replay_workload(model, num_requests, SENTINEL_RATE_PER_S, SENTINEL_SEED)
        self._runner = None

    @classmethod
    def for_run(cls, model: ModelConfig, engine: EngineConfig) -> "SpeedSentinel":
        """The sentinel of a measured run's model, engine and profile (engine.profile), against the
        reading its calibration took."""
        cost_model, _ = load_cost_model(model, engine, required=True)
        doc, _ = read_profile(profile_path(engine))
        return cls(model, engine, cost_model, baseline_ratio=baseline_of(doc))

    def read(self) -> SentinelReading:
        """The first read replays twice and keeps the second: measured on this VM, a fresh
        engine's first replay read 1.115 and the next ones 1.260 and, after a measured run that
        itself ran at 1.239, 1.244."""
        if self._runner is None:
            self._replay(warmup=True)
        return self._replay()

    def _replay(self, warmup: bool = False) -> SentinelReading:
        eng = build_engine(self.model, self.engine_cfg, SchedulerConfig(budget=SENTINEL_BUDGET_TOKENS),
                           self.cost_model, self._runner)
        if warmup:
            eng.warmup()
        self._runner = eng.executor
        result = replay(eng, synthetic_requests(self.workload, self.model.vocab_size))
        cols = result.steps.arrays()
        steps = [(float(d / p), float(p)) for d, p in zip(cols["duration_s"], cols["predicted_s"]) if p > 0]
        raw = time_weighted_median([r for r, _ in steps], [p for _, p in steps])
        return SentinelReading(raw / self.baseline_ratio, raw, len(steps), float(cols["duration_s"].sum()))
