"""Scaled SLOs: latency targets stated as multiples of this machine's own step times, so that an SLO
means on any CPU or GPU what it meant where it came from.

An absolute SLO (conf/slo/ch10.yaml: TTFT 1 s, mean gap 50 ms) is tied to the engine that set it:
the chapter's engine decoded at 36-74 ms a token, ours at about 1 ms, so there every budget meets
it until overload and a 500 ms stall costs nothing. A scaled SLO (conf/slo/*_scaled.yaml) names
multiples of two step times of the run's own cost model (its profile, at step_time_scale 1: the
machine as calibrated, not one run's drift):

- prefill_s: one forward pass over the workload's longest prompt, alone (the work a TTFT must
  hold at the least: a multiple under 1 is an SLO no request of that length can meet);
- decode_s: one decode step at full batch (scheduler.max_num_seqs rows), every row at the context
  of the workload's longest request (longest prompt + longest output): the slowest step that
  carries no prefill, the least a gap must hold when the batch is full.

TTFT <= ttft_prefill_multiple x prefill_s; mean gap <= tpot_decode_multiple x decode_s; per-request
p99 gap <= itl_p99_decode_multiple x decode_s. `resolve_slo` writes the seconds into the config
before the run (experiments/prepare.py), so every later reader sees seconds, as for an absolute SLO.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from chunklab.config import (ConfigError, EngineConfig, HardwareConfig, ModelConfig, RunConfig, SchedulerConfig,
                             SloConfig, WorkloadConfig)
from chunklab.cost_models import cost_model_for
from chunklab.cost_models.step_shape import Segment, StepShape
from chunklab.engine.policies import BUDGETS

MULTIPLES = ("ttft_prefill_multiple", "tpot_decode_multiple", "itl_p99_decode_multiple")


@dataclass(frozen=True)
class StepTimes:
    """The two step times a scaled SLO multiplies (seconds, on the run's cost model)."""
    prefill_s: float  # one pass over the longest prompt
    decode_s: float  # a decode step at full batch, every row at the longest request's context
    longest_prompt_tokens: int
    full_batch: int


def is_scaled(slo: SloConfig) -> bool:
    return any(getattr(slo, k) is not None for k in MULTIPLES)


def step_times(model: ModelConfig, engine: EngineConfig, hardware: HardwareConfig, scheduler: SchedulerConfig,
               w: WorkloadConfig) -> StepTimes:
    """The workload priced by the run's cost model (profile resolved; step_time_scale ignored)."""
    if w.kind != "synthetic" or not w.classes:
        raise ConfigError(f"slo: a scaled SLO needs a synthetic workload with length classes "
                          f"(workload={w.name} is a {w.kind}): use an absolute one (slo=ch10, itl_p99)")
    cost, _ = cost_model_for(model, engine, dataclasses.replace(hardware, step_time_scale=1.0), required=True)
    longest = max(c.max_tokens for c in w.classes)
    batch = scheduler.max_num_seqs
    mixed = engine.mixed_batch
    prefill = cost.predict(StepShape((), (Segment(longest, 0, True),), mixed))
    decode = cost.predict(StepShape((longest + w.max_output_tokens,) * batch, (), mixed))
    return StepTimes(prefill, decode, longest, batch)


def scaled_seconds(slo: SloConfig, times: StepTimes) -> SloConfig:
    """The SLO with each bound that has a multiple set to that multiple of its step time."""
    def bound(multiple: float | None, step_s: float, given: float | None) -> float | None:
        return given if multiple is None else multiple * step_s
    return dataclasses.replace(slo, ttft_s=bound(slo.ttft_prefill_multiple, times.prefill_s, slo.ttft_s),
                               tpot_s=bound(slo.tpot_decode_multiple, times.decode_s, slo.tpot_s),
                               itl_p99_s=bound(slo.itl_p99_decode_multiple, times.decode_s, slo.itl_p99_s))


def with_multiples(slo: SloConfig, factor: float) -> SloConfig:
    """The same SLO with every multiple times factor (the report's robustness check: halved, doubled)."""
    return dataclasses.replace(slo, **{k: None if getattr(slo, k) is None else getattr(slo, k) * factor
                                       for k in MULTIPLES})


def resolve_slo(cfg: RunConfig) -> RunConfig:
    """cfg with a scaled SLO's bounds in seconds; an absolute SLO unchanged."""
    if not is_scaled(cfg.slo):
        return cfg
    times = step_times(cfg.model, cfg.engine, cfg.hardware, cfg.scheduler, cfg.workload)
    return dataclasses.replace(cfg, slo=scaled_seconds(cfg.slo, times))


def describe(slo: SloConfig) -> str:
    """One phrase: the bounds in ms, and for a scaled SLO the rule that set them."""
    parts = []
    for name, seconds, multiple, step in (("TTFT", slo.ttft_s, slo.ttft_prefill_multiple, "one-pass prefill"),
                                          ("mean gap", slo.tpot_s, slo.tpot_decode_multiple, "full-batch decode step"),
                                          ("p99 gap", slo.itl_p99_s, slo.itl_p99_decode_multiple,
                                           "full-batch decode step")):
        if seconds is None:
            continue
        rule = f" ({multiple:g} x the {step})" if multiple is not None else ""
        parts.append(f"{name} <= {1e3 * seconds:.1f} ms{rule}")
    return ", ".join(parts)


def with_gap_target(s: SchedulerConfig, slo: SloConfig) -> SchedulerConfig:
    """The scheduler config with gap_target_s (and gap_target_kind) set where its budget policy reads one
    and they are null: the SLO's per-request p99 gap, bounding every step, else its mean gap, bounding
    each request's mean (seconds by now: after resolve_slo)."""
    if not BUDGETS.get(s.budget_policy).needs_gap_target:
        return s
    if s.gap_target_s is not None:
        return dataclasses.replace(s, gap_target_kind=s.gap_target_kind or "step")
    target = slo.itl_p99_s if slo.itl_p99_s is not None else slo.tpot_s
    if target is None:
        raise ConfigError(f"scheduler.budget_policy={s.budget_policy}: the SLO has no gap bound (slo.itl_p99_s and "
                          "slo.tpot_s are null) to take scheduler.gap_target_s from: give one")
    kind = s.gap_target_kind or ("step" if slo.itl_p99_s is not None else "mean")
    return dataclasses.replace(s, gap_target_s=target, gap_target_kind=kind)
