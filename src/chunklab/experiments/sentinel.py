"""A speed sentinel: how fast this machine runs now, against its profile.

A shared VM's speed drifts: on the 2-core AMD EPYC VM that ran the fidelity stage of
2026-12-01, measured serving steps ran 1.03-1.33x the profile's predictions from one run to
the next, ten minutes after calibration had measured 1.009 on the same kind of steps, and
the simulation's per-request error followed that ratio (correlation -0.81 for TPOT). The
sentinel reads the speed between measured runs: a short serving replay of calibration's own
kind (the chapter's mix at budget 512, calibration/serving.py), whose steps' median
measured / predicted time is its ratio. The profile was fit on such replays, so the ratio is
about 1 on the machine as it was calibrated; a simulation scaled by it
(hardware.step_time_scale) predicts the machine as it runs now, and says so in its conditions.

The replay is not the measured run: the ratio never looks at the steps it is used to predict.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from chunklab.calibration.serving import REPLAY_SEED, replay_workload
from chunklab.config import EngineConfig, ModelConfig, RunConfig, SchedulerConfig
from chunklab.engine.clock import ReplayClock
from chunklab.engine.cost_model import LinearProfile, load_cost_model
from chunklab.engine.engine import LLMEngine
from chunklab.engine.serve import serve
from chunklab.workload.synthetic import synthetic_requests

SENTINEL_BUDGET_TOKENS = 512
SENTINEL_RATE_PER_S = 8.0
SENTINEL_SEED = REPLAY_SEED + 100  # apart from calibration's replays: not a step the fit saw


def geometric_mean(values) -> float:
    values = list(values)
    return float(statistics.geometric_mean(values)) if values else float("nan")


@dataclass(frozen=True)
class SentinelReading:
    ratio: float  # median over the replay's steps of measured / predicted seconds
    num_steps: int
    duration_s: float  # the replay's compute time


class SpeedSentinel:
    """One model and KV pool, built once; read() replays the same requests each time."""

    def __init__(self, model: ModelConfig, engine: EngineConfig, cost_model: LinearProfile, num_requests: int = 24):
        self.model, self.cost_model = model, cost_model
        self.engine_cfg = dataclasses.replace(engine, executor="torch")
        self.workload = replay_workload(model, num_requests, SENTINEL_RATE_PER_S, SENTINEL_SEED)
        self._runner = None

    @classmethod
    def for_run(cls, cfg: RunConfig) -> "SpeedSentinel":
        """The sentinel of a measured run's model, engine and profile (engine.profile)."""
        cost_model, _ = load_cost_model(cfg.model, cfg.engine, required=True)
        return cls(cfg.model, cfg.engine, cost_model)

    def read(self) -> SentinelReading:
        """The first read replays twice and keeps the second: measured on this VM, a fresh
        engine's first replay read 1.115 and the next ones 1.260 and, after a measured run that
        itself ran at 1.239, 1.244."""
        if self._runner is None:
            self._replay(warmup=True)
        return self._replay()

    def _replay(self, warmup: bool = False) -> SentinelReading:
        eng = LLMEngine(self.model, self.engine_cfg, SchedulerConfig(budget=SENTINEL_BUDGET_TOKENS), ReplayClock(),
                        self._runner, self.cost_model)
        if warmup:
            eng.warmup()
        self._runner = eng.executor
        result = serve(eng, synthetic_requests(self.workload, self.model.vocab_size))
        cols = result.steps.arrays()
        ratios = [float(d / p) for d, p in zip(cols["duration_s"], cols["predicted_s"]) if p > 0]
        return SentinelReading(statistics.median(ratios), len(ratios), float(cols["duration_s"].sum()))
