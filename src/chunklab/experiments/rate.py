"""An arrival rate for any workload: a synthetic workload's Poisson rate, or a trace's timestamps
compressed (workload.trace.time_scale), so capacity and load mean the same for both kinds.

For a trace the seed changes only the synthetic prompt ids, never a decision (EOS is ignored),
so one seed is enough; for a synthetic mix each seed is another draw of the arrivals and lengths.
"""
from __future__ import annotations

import dataclasses
import math

from chunklab.config import RunConfig
from chunklab.experiments.sim_capacity import SimCapacity, bisect_capacity, with_rate
from chunklab.experiments.simulate import simulate_many
from chunklab.workload import make_requests

PROBE_KEYS = ("slo_attainment", "goodput_req_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p99_s", "queue_p50_s",
              "worst_stall_s", "output_tokens_per_s")


def natural_rate(cfg: RunConfig) -> float:
    """A trace slice's own mean arrival rate (requests / span), at time_scale 1."""
    at_one = dataclasses.replace(cfg.workload, trace=dataclasses.replace(cfg.workload.trace, time_scale=1.0))
    requests, _ = make_requests(dataclasses.replace(cfg, workload=at_one))
    span_s = max(r.arrival_s for r in requests) - min(r.arrival_s for r in requests)
    return (len(requests) - 1) / span_s


def at_rate(cfg: RunConfig, rate: float, seed: int, trace_rate: float | None = None) -> RunConfig:
    """cfg at `rate` req/s: a synthetic mix's Poisson rate, or a trace compressed to it
    (trace_rate: its natural_rate, computed once by the caller)."""
    if cfg.workload.kind == "synthetic":
        return with_rate(cfg, rate, seed, cfg.workload.num_requests)
    trace = dataclasses.replace(cfg.workload.trace, time_scale=(trace_rate or natural_rate(cfg)) / rate)
    return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, trace=trace, seed=seed))


def seeds_for(cfg: RunConfig, seeds: list[int]) -> list[int]:
    return seeds if cfg.workload.kind == "synthetic" else seeds[:1]


def probe(cfg: RunConfig, rate: float, seeds: list[int], trace_rate: float | None, processes: int | None) -> dict:
    """Means over seeds (equal request counts: the pooled attainment), at `rate`."""
    summaries = simulate_many([at_rate(cfg, rate, s, trace_rate) for s in seeds_for(cfg, seeds)], processes)
    return {"rate_per_s": rate} | {k: sum(s.get(k, math.nan) for s in summaries) / len(summaries) for k in PROBE_KEYS}


def search(cfg: RunConfig, seeds: list[int], target: float, rel_tol: float, processes: int | None = None,
           criterion=None, start: tuple[float, float] = (2.0, 16.0)) -> SimCapacity:
    """The highest rate passing `criterion` (default: >= target of requests in the SLO)."""
    trace_rate = natural_rate(cfg) if cfg.workload.kind == "trace" else None
    return bisect_capacity(lambda rate: probe(cfg, rate, seeds, trace_rate, processes), target, start, rel_tol,
                           criterion=criterion)
