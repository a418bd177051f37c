"""The perf stage's prefill ratios (chunklab/stages/perf_limits.py) on a machine whose speed drifts mid-stage."""
from types import SimpleNamespace

import pytest

from chunklab.stages import perf_limits as perf


def drifting_machine(monkeypatch, slowdown_after: int):
    """bench stand-ins on a machine that runs 2x slower from the `slowdown_after`-th measurement on.
    At full speed: peak 500 GFLOP/s, one pass 10 ms (mkl 20 ms), chunks 1.1x the one pass."""
    calls, orders = [0], []

    def speed():
        calls[0] += 1
        return 1.0 if calls[0] <= slowdown_after else 0.5

    def gemm_peaks(m, rows):
        return {"mkl": 200.0 * speed(), "panels": 500.0 * speed()}

    def prefill_split(m, configs, prompt_tokens, repeats, engine_cfg):
        orders.append([c for _, c in configs])
        base = 0.010 if engine_cfg is perf.PATHS["probed"] else 0.020
        # `repeats` samples of each split (one speed() reading a split, as before); the chunks' first
        # sample stalled 5x: a round that read one sample alone would take it
        return {(impl, c): [base * (1.0 if c == prompt_tokens else 1.1 * (5.0 if i == 0 else 1.0)) / s
                            for i in range(repeats)] for impl, c in configs for s in [speed()]}

    monkeypatch.setattr(perf.bench, "gemm_peaks", gemm_peaks)
    monkeypatch.setattr(perf.bench, "prefill_split", prefill_split)
    return orders


def test_ratios_pair_measurements_of_the_same_round_and_the_split_order_flips(monkeypatch):
    p = SimpleNamespace(prompt_tokens=1536, chunk_tokens=64, repeats=5, prefill_samples=3)  # the PerfParams read
    orders = drifting_machine(monkeypatch, slowdown_after=7)  # 5 measurements a round: slows inside round 2
    rounds = perf.prefill(None, p)
    assert orders[::2] == [[1536, 64], [64, 1536], [1536, 64], [64, 1536], [1536, 64]]
    flops = 0.5 * 500e9 * 0.010  # half the peak at full speed
    pre, fraction, ratio = perf.paired(rounds, flops)
    assert ratio["probed"] == pytest.approx(1.1) and ratio["mkl"] == pytest.approx(1.1)
    assert fraction["probed"] == pytest.approx(0.5) and fraction["mkl"] == pytest.approx(0.25)
    # against the stage's best peak, the median one pass (a slow round's) reads as half the machine's rate
    assert flops / pre["probed"][0] / 1e9 / 500.0 == pytest.approx(0.25)
