"""The report's one statistical rule: a paired comparison of two arms decided from a confidence
interval of their difference.

Two arms (two budgets, two paths) serve the same units: the same requests of the same seeds and
arrivals, or the same interleaved timing rounds. A statistic (a median, a p99, a share in SLO, a
maximum) is computed on each arm over the same units, and the effect is their relative difference,
(b - a) / max(|a|, |b|): how much the statistic moves going from arm a to arm b.

Interval: a two-stage cluster bootstrap (Davison & Hinkley 1997, ch. 2.4; the percentile method).
Each resample draws clusters (seeds) with replacement, then units (requests) with replacement within
each drawn cluster, and evaluates both arms on the very same draw, so the run-to-run noise that the
two arms share cancels and the noise of the arrivals is kept. With one cluster, only units are drawn.
The generator is seeded: the same data give the same interval.

Verdict, for a claim that the statistic moves in a stated direction:
- HOLDS: the 95% interval lies wholly on the claimed side of zero and |effect| >= MIN_EFFECT;
- FAILS ("does not hold"): the interval lies wholly on the other side;
- NOISE ("within noise"): otherwise (the interval holds zero, or the effect is under MIN_EFFECT);
- NA: an arm has no values.
Plain numpy, no pandas: the report's tables call it, and tests feed it synthetic data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

HOLDS, FAILS, NOISE, NA = "holds", "does not hold", "within noise", "n/a"
SCORE = {HOLDS: 1, NOISE: 0, FAILS: -1}  # a verdict as a DVC metric (dvc metrics show prints numbers)
MIN_EFFECT = 0.02  # the smallest relative change read as an effect
LEVEL = 0.95
RESAMPLES = 2000
SEED = 0

# statistic(indices) -> value: the arm's statistic over the units at these (repeatable) indices
Statistic = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class Interval:
    effect: float  # relative(a, b) on all the units
    lo: float  # the LEVEL percentile interval of the effect
    hi: float
    a: float  # each arm's statistic on all the units
    b: float
    clusters: int
    units: int

    def verdict(self, claimed: str) -> str:
        """claimed: "higher" or "lower", how the claim says b compares with a."""
        return decide(self, claimed)

    def text(self) -> str:
        return f"{100 * self.effect:+.1f}% [{100 * self.lo:+.1f}%, {100 * self.hi:+.1f}%]"


def relative(a: float, b: float) -> float:
    """(b - a) over the larger of |a| and |b|; 0 when both are 0. Bounded (a share of requests within an
    SLO can be 0 in one arm), and equal to (b - a) / |a| to first order for small changes."""
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else (b - a) / scale


def members_of(clusters: np.ndarray) -> list[np.ndarray]:
    """The unit indices of each cluster."""
    _, inverse = np.unique(clusters, return_inverse=True)
    return [np.flatnonzero(inverse == k) for k in range(inverse.max() + 1)]


def resample(members: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """One two-stage draw: indices into the units, clusters then units within each drawn cluster."""
    picked = rng.integers(0, len(members), len(members)) if len(members) > 1 else [0]
    return np.concatenate([members[k][rng.integers(0, len(members[k]), len(members[k]))] for k in picked])


def interval(stat_a: Statistic, stat_b: Statistic, clusters, resamples: int = RESAMPLES,
             level: float = LEVEL, seed: int = SEED) -> Interval:
    """The paired interval of relative(stat_a, stat_b). clusters: one label per unit (its seed),
    the units in the same order for both arms."""
    clusters = np.asarray(clusters)
    every = np.arange(len(clusters))
    a, b = float(stat_a(every)), float(stat_b(every))
    rng = np.random.default_rng(seed)
    members = members_of(clusters)
    draws = []
    for _ in range(resamples):
        idx = resample(members, rng)
        draws.append(relative(float(stat_a(idx)), float(stat_b(idx))))
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(np.asarray(draws, dtype=float), [tail, 100 - tail])
    return Interval(relative(a, b), float(lo), float(hi), a, b, len(members), len(clusters))


def decide(iv: Interval, claimed: str) -> str:
    """The rule above, for a claim that b is `claimed` ("higher" or "lower") than a."""
    if claimed not in ("higher", "lower"):
        raise ValueError(f"claimed must be 'higher' or 'lower', not {claimed!r}")
    sign = 1 if claimed == "higher" else -1
    lo, hi = sorted((sign * iv.lo, sign * iv.hi))
    if lo > 0 and abs(iv.effect) >= MIN_EFFECT:
        return HOLDS
    if hi < 0:
        return FAILS
    return NOISE


def of_values(values: np.ndarray, fn: Callable[[np.ndarray], float]) -> Statistic:
    """A statistic of one value per unit (a request's TTFT, whether it met the SLO)."""
    values = np.asarray(values, dtype=float)
    return lambda idx: fn(values[idx])


def of_pooled(arrays: list[np.ndarray], fn: Callable[[np.ndarray], float]) -> Statistic:
    """A statistic of many values per unit, pooled (every gap of the drawn requests)."""
    return lambda idx: fn(np.concatenate([arrays[i] for i in idx])) if len(idx) else float("nan")
