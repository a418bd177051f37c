"""Capacity: the highest arrival rate at which >= target of the requests meet the SLO.

One search for every stage and for workload.load: `bisect` brackets the capacity from any
measure(rate) -> probe dict, measured or simulated; `search` runs it on simulated probes (the
real scheduler on a cost model, exact for a profile, so it can be searched far finer than a
measured run allows), pooled over several seeds, for a synthetic mix (its Poisson rate) or a
trace (its timestamps compressed, workload.trace.time_scale), so capacity and load mean the
same for both kinds.

For a trace the seed changes only the synthetic prompt ids, never a decision (EOS is ignored),
so one seed is enough; for a synthetic mix each seed is another draw of the arrivals and lengths.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from chunklab.config import ModelConfig, RunConfig, WorkloadConfig
from chunklab.experiments.simulate import simulate_many
from chunklab.workload import make_requests

# What a probe records (means over its seeds): the capacity tables' columns.
PROBE_KEYS = ("slo_attainment", "goodput_req_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p99_s", "output_tokens_per_s")
# ... and, for the production maps, where the time goes at each rate.
QUEUE_KEYS = ("slo_attainment", "goodput_req_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p99_s", "queue_p50_s",
              "worst_stall_s", "output_tokens_per_s")


@dataclass
class Capacity:
    lo_req_per_s: float  # highest rate seen to pass
    hi_req_per_s: float  # lowest rate seen to fail
    probes: list[dict] = field(default_factory=list)  # every rate tried: its pooled attainment, goodput, ...

    @property
    def rate_req_per_s(self) -> float:
        return self.lo_req_per_s


def natural_rate(workload: WorkloadConfig, model: ModelConfig) -> float:
    """A trace slice's own mean arrival rate (requests / span), at time_scale 1."""
    at_one = dataclasses.replace(workload, trace=dataclasses.replace(workload.trace, time_scale=1.0))
    requests, _ = make_requests(at_one, model)
    span_s = max(r.arrival_s for r in requests) - min(r.arrival_s for r in requests)
    return (len(requests) - 1) / span_s


def at_rate(cfg: RunConfig, rate: float, seed: int, trace_rate: float | None = None) -> RunConfig:
    """cfg at `rate` req/s with this seed: a synthetic mix's Poisson rate, or a trace compressed to it
    (trace_rate: its natural_rate, computed once by the caller)."""
    if cfg.workload.kind == "synthetic":
        return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, rate_per_s=rate, load=None, seed=seed))
    trace = dataclasses.replace(cfg.workload.trace, time_scale=(trace_rate or natural_rate(cfg.workload, cfg.model)) / rate)
    return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, trace=trace, seed=seed))


def seeds_for(workload: WorkloadConfig, seeds: list[int]) -> list[int]:
    return seeds if workload.kind == "synthetic" else seeds[:1]


def probe(cfg: RunConfig, rate: float, seeds: list[int], processes: int | None = None,
          trace_rate: float | None = None, keys: tuple[str, ...] = PROBE_KEYS) -> dict:
    """Simulated at `rate`: each key's mean over the seeds (equal request counts: the pooled attainment)."""
    summaries = simulate_many([at_rate(cfg, rate, s, trace_rate) for s in seeds_for(cfg.workload, seeds)], processes)
    return {"rate_per_s": rate} | {k: sum(s.get(k, math.nan) for s in summaries) / len(summaries) for k in keys}


def search(cfg: RunConfig, seeds: list[int], target: float = 0.9, rel_tol: float = 0.02,
           processes: int | None = None, criterion=None, start: tuple[float, float] = (2.0, 16.0),
           keys: tuple[str, ...] = PROBE_KEYS) -> Capacity:
    """The simulated capacity of cfg's workload (cfg.workload.num_requests a seed) under its scheduler."""
    trace_rate = natural_rate(cfg.workload, cfg.model) if cfg.workload.kind == "trace" else None
    return bisect(lambda rate: probe(cfg, rate, seeds, processes, trace_rate, keys), target, start, rel_tol,
                  criterion=criterion)


def bisect(measure, target: float, start: tuple[float, float], rel_tol: float,
           widen: float = 2.0, criterion=None, grow: bool = False) -> Capacity:
    """measure(rate) -> a probe dict with slo_attainment (simulated or measured). Widens the start
    bracket by `widen` until it holds the capacity, then bisects in log-rate to hi / lo <= 1 + rel_tol.
    criterion(probe) -> bool replaces `slo_attainment >= target` (a published paper's definition).
    grow: each further widening step is the square of the last (1.08, 1.17, 1.36, ...), so a start
    that misses by a factor f costs O(log log f) probes to bracket, not O(log f): for measured probes,
    which cost seconds each and start from a prediction that can miss by tens of percent."""
    probes: list[dict] = []
    seen: dict[float, bool] = {}
    ok = criterion or (lambda probe: probe["slo_attainment"] >= target)

    def passes(rate: float) -> bool:
        if rate not in seen:
            probes.append(measure(rate))
            seen[rate] = bool(ok(probes[-1]))
        return seen[rate]

    lo, hi = start
    step = widen
    while not passes(lo):  # widen until the bracket holds the capacity
        lo, hi = lo / step, lo
        step = step * step if grow else step
        if lo < 1e-3:
            return Capacity(0.0, hi, probes)
    step = widen
    while passes(hi):
        lo, hi = hi, hi * step
        step = step * step if grow else step
        if hi > 1e4:
            return Capacity(lo, math.inf, probes)
    while hi / lo > (1 + rel_tol) * (1 + 1e-9):  # a bracket built to 1 + rel_tol is done, rounding aside
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return Capacity(lo, hi, probes)


def rate_factor(share: float, simulated, rate_req_per_s: float, span: float = 4.0, steps: int = 10) -> float | None:
    """The factor f at which the simulated curve matches one measured probe: simulated(rate * f) == share,
    the share within the SLO measured at `rate_req_per_s`. Read the measured curve as the simulated one
    at rate x f, and its capacity is the simulated capacity / f: a start for a measured search that one
    probe has corrected (the simulator's optimism on a machine's noisy steps is what f absorbs).
    simulated(rate) -> share; bisected in log-rate within [1/span, span], shares falling with the rate.
    None where one probe cannot place it: a share of 0 or 1 matches a whole range of rates."""
    if not 0.0 < share < 1.0:
        return None
    lo, hi = 1.0 / span, span
    if simulated(rate_req_per_s * hi) > share:
        return hi
    if simulated(rate_req_per_s * lo) < share:
        return lo
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if simulated(rate_req_per_s * mid) > share else (lo, mid)
    return math.sqrt(lo * hi)
