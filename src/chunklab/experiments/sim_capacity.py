"""Capacity by simulation: the highest Poisson rate at which >= target of the requests meet
the SLO, pooled over several seeds of many requests, bracketed to hi / lo <= 1 + rel_tol.
Exact for a profile, so it can be searched far finer than a measured run allows."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from chunklab.config import RunConfig
from chunklab.experiments.simulate import simulate_many


@dataclass
class SimCapacity:
    lo_req_per_s: float  # highest rate seen to pass
    hi_req_per_s: float  # lowest rate seen to fail
    probes: list[dict] = field(default_factory=list)  # rate, pooled attainment, goodput, ...

    @property
    def rate_req_per_s(self) -> float:
        return self.lo_req_per_s


def with_rate(cfg: RunConfig, rate: float, seed: int, num_requests: int) -> RunConfig:
    w = dataclasses.replace(cfg.workload, rate_per_s=rate, load=None, seed=seed, num_requests=num_requests)
    return dataclasses.replace(cfg, workload=w)


def probe(cfg: RunConfig, rate: float, seeds: list[int], num_requests: int, processes: int | None) -> dict:
    summaries = simulate_many([with_rate(cfg, rate, s, num_requests) for s in seeds], processes)
    keys = ("slo_attainment", "goodput_req_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p99_s", "output_tokens_per_s")
    # equal request counts per seed: the pooled attainment is the mean
    return {"rate_per_s": rate} | {k: sum(s.get(k, math.nan) for s in summaries) / len(summaries) for k in keys}


def search_capacity(cfg: RunConfig, seeds: list[int], num_requests: int, target: float = 0.9,
                    start: tuple[float, float] = (2.0, 16.0), rel_tol: float = 0.02,
                    processes: int | None = None) -> SimCapacity:
    return bisect_capacity(lambda rate: probe(cfg, rate, seeds, num_requests, processes), target, start, rel_tol)


def bisect_capacity(measure, target: float, start: tuple[float, float], rel_tol: float,
                    widen: float = 2.0, criterion=None) -> SimCapacity:
    """measure(rate) -> a probe dict with slo_attainment (simulated or measured). Widens the start
    bracket by `widen` until it holds the capacity, then bisects in log-rate to hi / lo <= 1 + rel_tol.
    criterion(probe) -> bool replaces `slo_attainment >= target` (a published paper's definition)."""
    probes: list[dict] = []
    seen: dict[float, bool] = {}
    ok = criterion or (lambda probe: probe["slo_attainment"] >= target)

    def passes(rate: float) -> bool:
        if rate not in seen:
            probes.append(measure(rate))
            seen[rate] = bool(ok(probes[-1]))
        return seen[rate]

    lo, hi = start
    while not passes(lo):  # widen until the bracket holds the capacity
        lo, hi = lo / widen, lo
        if lo < 1e-3:
            return SimCapacity(0.0, hi, probes)
    while passes(hi):
        lo, hi = hi, hi * widen
        if hi > 1e4:
            return SimCapacity(lo, math.inf, probes)
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return SimCapacity(lo, hi, probes)
