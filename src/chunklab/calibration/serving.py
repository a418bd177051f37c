"""Serving replays for calibration: steps as serving really runs them.

The probe times each shape right after a short lead-in; a serving loop runs steps back to
back, decodes interleaved with prefill chunks of other sequences, with the caches warm or
cold as that order leaves them. On the calibration machine mixed steps ran 7.5-17.5% slower
in serving than the probe predicted and decode-only steps 3.5% faster (issue 18). These
replays put such steps into the fit: a chapter-like mix, scaled to the model's context, at a
rate that keeps a prefill in flight, at one that leaves the engine idle between requests, and
in bursts that keep every batch full.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chunklab.config import EngineConfig, LengthClass, ModelConfig, SchedulerConfig, WorkloadConfig
from chunklab.engine.build import build_engine
from chunklab.engine.replay import replay
from chunklab.cost_models.step_shape import FEATURES
from chunklab.workload.synthetic import synthetic_requests

# (budget_tokens, rate_per_s) of each replay; its seed is REPLAY_SEED + its index. The last
# three are bursts (every request queued at once): batches run full, as at capacity, on any
# machine. Without them (measured on the Intel Xeon, blocked KV pool): decode batches averaged
# 1.4 rows in the four replays against 5.8 at 32 req/s (about twice capacity), the fit
# over-predicted steps there (busy time measured / predicted 0.92-0.94 at budget 512), and the
# simulator put capacity 6.5% below what the capacity stage measured.
BURST_RATE_PER_S = 1000.0
REPLAYS = ((64, 8.0), (512, 8.0), (8192, 8.0), (512, 2.0),
           (64, BURST_RATE_PER_S), (512, BURST_RATE_PER_S), (8192, BURST_RATE_PER_S))
REPLAY_SEED = 1000  # apart from the seeds experiments use (3, 4, 5 and the capacity seeds 1-5)


@dataclass
class ServingSteps:
    features: np.ndarray  # [steps, len(FEATURES)]
    duration_s: np.ndarray  # [steps]
    replay: np.ndarray  # [steps]: which replay each step came from


def replay_workload(model: ModelConfig, num_requests: int, rate_per_s: float, seed: int) -> WorkloadConfig:
    """The chapter's mix (35% long prompts, the rest 16-32 tokens, 32-64 out), long prompts
    capped to three quarters of the model's context."""
    long_tokens = min(1536, model.max_seq_len * 3 // 4)
    out_max = min(64, model.max_seq_len - long_tokens)
    return WorkloadConfig(name="calibration_replay", num_requests=num_requests, seed=seed, rate_per_s=rate_per_s,
                          classes=(LengthClass("long", 0.35, long_tokens, long_tokens),
                                   LengthClass("short", 0.65, 16, 32)),
                          min_output_tokens=min(32, out_max), max_output_tokens=out_max)


def serving_steps(model: ModelConfig, engine: EngineConfig, num_requests: int,
                  on_step=None) -> ServingSteps:
    """Every step of each replay in REPLAYS on the real engine (engine: calibration's own, a torch
    executor on a replay clock), with its features."""
    runner = None
    feats, durations, replays = [], [], []
    for i, (budget, rate) in enumerate(REPLAYS):
        eng = build_engine(model, engine, SchedulerConfig(budget=budget), executor=runner)
        runner = eng.executor  # one model and KV pool for every replay
        eng.warmup()
        requests = synthetic_requests(replay_workload(model, num_requests, rate, REPLAY_SEED + i), model.vocab_size)
        result = replay(eng, requests, on_done=on_step)
        cols = result.steps.arrays()
        feats.append(np.stack([cols["f_" + name] for name in FEATURES], axis=1))
        durations.append(cols["duration_s"].copy())
        replays.append(np.full(len(result.steps), i))
    return ServingSteps(np.concatenate(feats), np.concatenate(durations), np.concatenate(replays))
