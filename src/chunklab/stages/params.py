"""params.yaml, read one typed way: one dataclass per section, checked whole on load.

Every stage reads its sections through `load_params`. A key the dataclass does not name, a
missing key without a default, or a value of the wrong type is a ParamsError whose message is
one line naming the file and the key (`params.yaml: sim_maps.loads[2]: expected float, got 'x'`).
Values are never reshaped: an int given for a float becomes that float, nothing else is coerced.
Defaults exist only where a stage has always treated the key as optional.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from chunklab.stages.typed_yaml import ParamsError, typed


Section = dataclass(frozen=True, kw_only=True)


def _overrides() -> list[str]:
    return field(default_factory=list)


@Section
class CalibrateParams:
    seed: int
    num_random_shapes: int
    rounds: int
    burst: int
    held_out_share: float
    replay_requests: int
    overrides: list[str]


@Section
class FidelityTrace:
    rows: int
    start_offset: int
    budget: int
    overrides: list[str] = _overrides()


@Section
class FidelityParams:
    workload: str
    num_requests: int
    seed: int
    repeats: int
    budgets: list[int]
    loads: list[float]  # of this machine's measured capacity (the capacity stage's, budget 512)
    trace: FidelityTrace
    processes: int
    mix_overrides: list[str] = _overrides()
    overrides: list[str]


@Section
class PrefillSplitParams:
    prompt_tokens: int
    chunk_tokens: list[int]
    attention: list[str]
    repeats: int
    overrides: list[str] = _overrides()


@Section
class TokenBudgetParams:
    budgets: list[int]
    seeds: list[int]
    small_requests: int
    large_requests: int
    seed: int
    repeats: int
    extra_seeds: list[int]
    rate_per_s: float
    overrides: list[str]


@Section
class PerfPeerParams:
    repeats: int
    prompt_tokens: int
    prefill_chunks: list[int]
    static_batch: int
    static_prompt_tokens: int
    static_new_tokens: int
    static_budget: int
    serve_requests: int
    serve_repeats: int = 1
    rate_per_s: float
    seed: int
    budgets: list[int]


@Section
class PerfParams:
    repeats: int
    prefill_samples: int
    prompt_tokens: int
    chunk_tokens: int
    decode_context: int
    overhead_requests: int
    hf_prompt_tokens: int
    hf_new_tokens: int
    rss_requests: tuple[int, int]  # (small, large)
    budgets: list[int]
    sim_requests: int
    sim_trace_rows: int | None  # None: every row
    trace_overrides: list[str]
    time_build: bool
    peer: PerfPeerParams
    overrides: list[str] = _overrides()


@Section
class CapacityParams:
    workload: str
    budget: int
    num_requests: int
    seed: int
    target: float
    rel_tol: float
    widen: float
    sim_rel_tol: float
    overrides: list[str]


@Section
class SimParams:
    seeds: list[int]
    num_requests: int
    processes: int
    overrides: list[str]


@Section
class SimTuningParams:
    workloads: list[str]
    n_trials: int
    load: float
    seed: int


@Section
class SimCapacityParams:
    workloads: list[str]
    budgets: list[int]
    target: float
    rel_tol: float


@Section
class SimMapsParams:
    workloads: list[str]
    budgets: list[int]
    loads: list[float]


@Section
class SimTracesParams:
    budgets: list[int]
    compressed_budget: int
    compressed_time_scale: float
    timeline_bin_s: float
    num_requests: int | None  # None: every row
    overrides: list[str]


@Section
class VidurDevice:
    name: str  # the outputs' prefix: <name>_fit.json, <name>_operators.csv, <name>_points.csv, <name>_fit.png
    hardware: str  # the preset fit (conf/hardware/<hardware>.yaml)
    data: str  # Vidur's operator times of Llama-2-7B measured on that device


@Section
class CostModelsParams:
    devices: list[VidurDevice]  # each GPU preset fit on its own device's operator times
    cpu_overrides: list[str]


@Section
class PublishedSlo:
    name: str
    p99_tbt_s: float
    budget: int
    published_ratio: str


@Section
class PublishedParams:
    model: str
    hardware: str
    workload: str
    overrides: list[str]
    median_delay_s: float
    vllm: dict[str, int | str]  # scheduler knobs of each side
    sarathi: dict[str, int | str]
    slos: list[PublishedSlo]


@Section
class SimProductionParams:
    pairs: list[tuple[str, str]]  # (model, hardware)
    workloads: list[str]
    trace_workloads: list[str]
    trace_rows: int
    num_requests: int
    seeds: list[int]
    slo: str
    target: float
    capacity_rel_tol: float
    budgets: list[int]
    loads: list[float]
    table_load: float
    processes: int
    overrides: list[str]
    published: PublishedParams


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
    prefill_budget: int  # the prefill pool's budget (whole prompts)
    links: list[str]  # conf/link/ presets for the KV transfer
    router: str  # conf/router/: arrivals and hand-offs
    tie_margin: float  # a winner by less than this share is a tie (a modelling margin, not noise)
    processes: int
    overrides: list[str]


@Section
class ClusterParams:
    workload: str
    num_requests: int
    seed: int
    repeats: int
    loads: list[float]  # of this machine's measured capacity (the capacity stage's, budget 512)
    link_repeats: int  # timed transfers per size of the shm link
    processes: int  # simulated runs in parallel
    overrides: list[str] = _overrides()


@Section
class Params:
    calibrate: CalibrateParams
    fidelity: FidelityParams
    prefill_split: PrefillSplitParams
    token_budget: TokenBudgetParams
    perf: PerfParams
    capacity: CapacityParams
    sim: SimParams
    sim_tuning: SimTuningParams
    sim_capacity: SimCapacityParams
    sim_maps: SimMapsParams
    sim_traces: SimTracesParams
    cost_models: CostModelsParams
    sim_production: SimProductionParams
    sim_disagg: SimDisaggParams
    cluster: ClusterParams


def load_params(path: str | Path) -> Params:
    """Every section of the params file at path, typed; ParamsError (one line) on any mismatch."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ParamsError(f"{path}: unreadable: {' '.join(str(exc).split())}") from None
    try:
        return typed(Params, doc, "")
    except ParamsError as exc:
        raise ParamsError(f"{path}: {exc}") from None
