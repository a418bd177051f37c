"""The params.yaml (sub)sections more than one stage reads, typed once: `sim` (the four sim_*
stages, and the plots stage's captions), a cost_models device (cost_models, and the plots
stage's fit figures) and `sim_disagg` (its stage, and sim_sensitivity, which reruns its grid).
A section one stage owns lives in that stage's module."""
from __future__ import annotations

from chunklab.stages.typed_yaml import Section


@Section
class SimParams:
    seeds: list[int]
    num_requests: int
    processes: int
    overrides: list[str]


@Section
class VidurDevice:
    name: str  # the outputs' prefix: <name>_fit.json, <name>_operators.csv, <name>_points.csv, <name>_fit.png
    hardware: str  # the preset fit (conf/hardware/<hardware>.yaml)
    data: str  # Vidur's operator times of Llama-2-7B measured on that device


@Section
class SimDisaggParams:
    pairs: list[tuple[str, str, float]]  # (model, hardware, SLO scale: each SLO set's seconds x this)
    gpus: list[int]  # N: colocated N replicas against every xP/yD split with x + y = N
    workloads: list[str]
    trace_workloads: list[str]
    num_requests: int  # per run on min(gpus) GPUs; N GPUs run N / min(gpus) x as many (a trace: its first rows)
    seed: int
    slos: list[str]  # conf/slo/ sets, each judged on every run
    capacity_slo: str  # one of slos: single-GPU capacity is the rate with >= target of requests within it
    target: float
    capacity_rel_tol: float
    loads: list[float]  # x N x the single-GPU capacity
    verdict_loads: list[float]  # the loads the regime verdicts read (around capacity)
    throughput_load: float  # one of loads, high enough to saturate every topology: the throughput verdict
    budgets: list[int]  # the colocated replicas' budget, tuned per point (the best of these)
    colocated_policies: list[str]  # budget policies (engine/policies/) the colocated replicas also run, one run
    # per SLO set (the policy's gap target is that set's), judged under that set only
    prefill_budget: int  # the prefill pool's budget (whole prompts)
    links: list[str]  # conf/link/ presets for the KV transfer
    router: str  # conf/router/: arrivals and hand-offs
    tie_margin: float  # a winner by less than this share is a tie (a modelling margin, not noise)
    processes: int
    overrides: list[str]
