"""The report's one statistical rule (metrics/paired.py), on synthetic data whose answer is known:
a real shift holds, the same shift the other way does not hold, no shift is within noise, and a
shift under the minimum effect is within noise however tight its interval."""
import numpy as np
import pytest

from chunklab.metrics.paired import FAILS, HOLDS, MIN_EFFECT, NOISE, interval, of_pooled, of_values


def arms(shift: float, noise: float = 0.05, seeds: int = 5, per_seed: int = 100, seed: int = 1):
    """The same requests under two arms: b = a x (1 + shift) x its own small noise."""
    rng = np.random.default_rng(seed)
    a = rng.lognormal(0.0, 0.5, seeds * per_seed)
    b = a * (1 + shift) * rng.lognormal(0.0, noise, a.size)
    return a, b, np.repeat(np.arange(seeds), per_seed)


@pytest.mark.parametrize("shift, claimed, expected", [
    (0.10, "higher", HOLDS), (-0.10, "higher", FAILS), (-0.10, "lower", HOLDS), (0.10, "lower", FAILS),
    (0.0, "higher", NOISE), (0.0, "lower", NOISE)])
def test_a_shift_decides_the_verdict_either_way(shift, claimed, expected):
    a, b, clusters = arms(shift)
    iv = interval(of_values(a, np.median), of_values(b, np.median), clusters, resamples=400)
    assert iv.verdict(claimed) == expected, iv


def test_an_effect_under_the_minimum_is_noise_even_when_its_interval_excludes_zero():
    a, b, clusters = arms(MIN_EFFECT / 2, noise=0.001)
    iv = interval(of_values(a, np.median), of_values(b, np.median), clusters, resamples=400)
    assert iv.lo > 0  # the shift is real
    assert iv.verdict("higher") == NOISE


def test_pairing_removes_the_shared_noise():
    """The arms share a large per-request noise: paired, a 5% shift is decided; the unpaired
    interval of the same data (b's requests shuffled) cannot decide it."""
    a, b, clusters = arms(0.05, noise=0.01)
    paired = interval(of_values(a, np.mean), of_values(b, np.mean), clusters, resamples=400)
    shuffled = np.random.default_rng(2).permutation(b)
    unpaired = interval(of_values(a, np.mean), of_values(shuffled, np.mean), clusters, resamples=400)
    assert paired.hi - paired.lo < (unpaired.hi - unpaired.lo) / 3
    assert paired.verdict("higher") == HOLDS


def test_pooled_statistics_draw_whole_units():
    gaps_a = [np.full(10, 1.0), np.full(10, 2.0)]
    gaps_b = [np.full(10, 1.5), np.full(10, 2.5)]
    iv = interval(of_pooled(gaps_a, np.max), of_pooled(gaps_b, np.max), [0, 0], resamples=50)
    assert iv.a == 2.0 and iv.b == 2.5 and iv.units == 2 and iv.clusters == 1


def test_the_interval_is_repeatable():
    a, b, clusters = arms(0.03)
    one = interval(of_values(a, np.median), of_values(b, np.median), clusters, resamples=200)
    two = interval(of_values(a, np.median), of_values(b, np.median), clusters, resamples=200)
    assert one == two
