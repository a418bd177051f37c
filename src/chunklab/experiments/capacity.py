"""Capacity: the highest arrival rate at which a configuration still serves >= target
of its requests within the SLO (DistServe's definition), found by bisection."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from chunklab.app import run_tracked
from chunklab.experiments.compose import compose_run_config


@dataclass
class CapacityResult:
    rate_per_s: float  # highest rate that met the target (the bracket's low end if none did)
    bound: str  # "found" | "below_bracket" (even the lowest rate failed) | "above_bracket"
    probes: list[dict] = field(default_factory=list)  # every probe's summary, with its rate

    def trace(self) -> str:
        return " ".join(f"{p['rate_per_s']:.3g}:{p['slo_attainment']:.2f}" for p in self.probes)


def probe(overrides: list[str], rate: float, run_dir: Path) -> dict:
    cfg = compose_run_config(overrides + [f"workload.rate_per_s={rate:.6g}"])
    out = run_tracked(cfg, run_dir, {"sweep": "capacity", "overrides": " ".join(overrides)})
    return {"rate_per_s": rate} | out.summary


def search_capacity(overrides: list[str], lo: float, hi: float, target: float, rel_tol: float,
                    run_dir: Path) -> CapacityResult:
    """Bisection in log-rate until hi / lo <= 1 + rel_tol. Assumes attainment falls with rate;
    every probe is kept so a reader can see where that did not hold."""
    probes = []

    def passes(rate: float) -> bool:
        probes.append(probe(overrides, rate, run_dir / f"rate-{rate:.4g}"))
        return probes[-1]["slo_attainment"] >= target

    if not passes(lo):
        return CapacityResult(lo, "below_bracket", probes)
    if passes(hi):
        return CapacityResult(hi, "above_bracket", probes)
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return CapacityResult(lo, "found", probes)
