"""Scaled SLOs (experiments/slo.py): bounds stated as multiples of this machine's own step times,
resolved to seconds before the run, one line for a workload they cannot price."""
import dataclasses

import pytest

from chunklab.config import ConfigError
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.slo import describe, scaled_seconds, step_times, with_multiples

PROFILE = "outputs/profiles/machine.json"  # the committed tables' machine


def composed(*overrides):
    return compose_run_config(["engine=simulated", f"engine.profile={PROFILE}", "tracking=none", *overrides])


def times(cfg):
    return step_times(cfg.model, cfg.engine, cfg.hardware, cfg.scheduler, cfg.workload)


def test_a_scaled_slo_is_its_multiples_of_the_machine_s_step_times():
    cfg = composed("slo=stall_scaled")
    t = times(cfg)
    assert t.longest_prompt_tokens == 1536 and t.full_batch == cfg.scheduler.max_num_seqs
    assert t.prefill_s > 10 * t.decode_s > 0  # a 1536-token pass against one decode step
    assert cfg.slo.ttft_s == pytest.approx(2.0 * t.prefill_s)
    assert cfg.slo.itl_p99_s == pytest.approx(5.0 * t.decode_s) and cfg.slo.tpot_s is None
    assert "5 x the full-batch decode step" in describe(cfg.slo)


def test_the_bounds_follow_the_workload_and_the_batch():
    short = times(composed("slo=chapter_scaled", "workload.classes.0.max_tokens=768", "workload.classes.0.min_tokens=768"))
    assert short.prefill_s < times(composed("slo=chapter_scaled")).prefill_s
    small_batch = times(composed("slo=chapter_scaled", "scheduler.max_num_seqs=2"))
    assert small_batch.decode_s < times(composed("slo=chapter_scaled")).decode_s


def test_halving_and_doubling_the_multiples_halves_and_doubles_the_seconds():
    cfg = composed("slo=chapter_scaled")
    half = scaled_seconds(with_multiples(cfg.slo, 0.5), times(cfg))
    double = scaled_seconds(with_multiples(cfg.slo, 2.0), times(cfg))
    assert half.ttft_s == pytest.approx(cfg.slo.ttft_s / 2) and double.tpot_s == pytest.approx(cfg.slo.tpot_s * 2)


def test_an_absolute_slo_is_left_as_given():
    assert dataclasses.asdict(composed("slo=ch10").slo)["ttft_s"] == 1.0


def test_a_trace_workload_cannot_price_a_scaled_slo():
    with pytest.raises(ConfigError, match="scaled SLO needs a synthetic workload"):
        composed("slo=chapter_scaled", "workload=azure_conv")
