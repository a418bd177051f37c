"""Typed run configuration, built once from the composed Hydra config and validated.

Nothing below the entry point sees a DictConfig. Every bad value raises
ConfigError whose message names the key and the value.
"""
from __future__ import annotations

import os
from pathlib import Path
from dataclasses import dataclass, field

# A run keeps every request's record and token times in memory until it writes requests.csv
# and its percentiles: about 6.4 KB a request (a simulated ch10 run of 40,000 requests peaked
# at 412 MiB, 5,000 at 194 MiB), so 10^6 requests take ~6.5 GB. Past that, split the work.
MAX_REQUESTS = 1_000_000


class ChunklabError(Exception):
    """A user-facing error: printed as one line, no traceback."""


class ConfigError(ChunklabError):
    pass


@dataclass(frozen=True)
class TinyGPTConfig:
    """TinyGPT's architecture; the defaults are the chapter's reference model (5,838,080 params)."""
    vocab_size: int = 260
    num_layers: int = 6
    d_model: int = 256
    num_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int = 32
    mlp_hidden: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    init_std: float = 0.02


@dataclass(frozen=True)
class ModelConfig(TinyGPTConfig):
    """The architecture plus how a run instantiates it (conf/model/)."""
    name: str = "tiny_gpt"
    seed: int = 0  # weights are random, drawn from this seed
    dtype: str = "float32"  # float32 | float64 | bfloat16
    attention: str = "sdpa"  # sdpa | naive (materialised scores; ablation only)


@dataclass(frozen=True)
class EngineConfig:
    executor: str = "torch"  # an executor's name (engine/build.py, EXECUTORS): torch (real forward passes), simulated
    # Calibrated step-cost profile: simulates a run, guards a real one against machine noise and
    # sets workload.load's capacity. auto: this machine's (calibration/machine.py), calibrated on
    # first use; a relative path is taken from the project directory (chunklab.paths).
    profile: str = "auto"
    device: str = "cpu"  # cpu | cuda
    threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    clock: str = "replay"  # replay | wall
    mixed_batch: bool = True  # one forward per step for decodes and every chunk
    # true: each forward is one call into the fused C++ kernels (model/csrc; float32 on CPU);
    # false: eager PyTorch ops, for debugging and wherever the C++ build cannot run.
    compile: bool = True
    # The fused forward's fp32 GEMMs: mkl (at::mm) | onednn (prepacked) | panels (the project's
    # streaming kernel for decode batch sizes) | auto: per batch size, whichever this machine
    # runs faster, probed once and cached (model/linear_library.py).
    linear_library: str = "auto"
    # The fused forward's attention for prefill chunks: paged (the project's causal kernel over the
    # paged pool, model/csrc/prefill_attention.cpp) | sdpa (gather the context, ATen's SDPA).
    prefill_attention: str = "paged"
    block_size: int = 16  # tokens per KV block
    num_blocks: int = 1024  # KV blocks in the pool; 0: sized from the hardware's memory (engine/kv_pool.py)
    temperature: float = 0.0  # 0 = greedy
    sampling_seed: int = 0


@dataclass(frozen=True)
class SchedulerConfig:
    budget: int = 512  # tokens per step
    ordering: str = "decode_first"  # an ordering policy's name (engine/policies/, ORDERINGS)
    admission: str = "fcfs"  # an admission policy's name (engine/policies/, ADMISSIONS)
    max_num_seqs: int = 8  # running sequences at most
    max_partial_prefills: int = 1  # prefills in flight across steps at once
    long_prefill_threshold: int = 0  # cap on one prefill's chunk per step; 0 = off
    # How each step's budget is chosen (engine/policies/, BUDGETS): fixed (`budget` every step), or an
    # adaptive one, for which `budget` is the most a step may take
    budget_policy: str = "fixed"
    pressure_budget_tokens: int = 512  # load_adaptive: the budget while prefills queue behind running decodes
    # slo_adaptive: the gap a step may take while decodes run; null: the SLO in force's (experiments/prepare.py)
    gap_target_s: float | None = None
    # what the gap target bounds: "step", every gap (a p99 or stall bound); "mean", each request's mean gap
    # (a TPOT bound: a request ahead of it may spend what it saved on one longer step). null: from the SLO
    gap_target_kind: str | None = None


@dataclass  # not frozen: Hydra builds list items from this type while composing, and must fill them
class LengthClass:
    label: str
    weight: float
    min_tokens: int
    max_tokens: int


@dataclass(frozen=True)
class TraceConfig:
    path: str = ""
    start_offset: int = 0  # data rows skipped from the top; workload.num_requests rows are read
    time_scale: float = 1.0  # arrival times are multiplied by this (< 1 is faster)
    # token counts are multiplied by this; null: the trace's real lengths for a model whose context
    # holds 4,096 tokens, else context / 4,096 (TinyGPT's 2,048: 0.5), see trace_length_scale
    length_scale: float | None = 1.0
    overlong: str = "clip"  # clip | reject: prompts longer than the model allows


@dataclass(frozen=True)
class WorkloadConfig:
    name: str = "ch10_mixed"
    kind: str = "synthetic"  # synthetic | trace
    num_requests: int | None = 24  # null: every row of a trace (synthetic workloads need a number)
    seed: int = 3
    arrival: str = "poisson"  # poisson | gamma | all_at_once
    rate_per_s: float | None = 8.0  # Poisson/gamma rate; null when workload.load sets it
    load: float | None = None  # instead of rate_per_s: a fraction of the simulated capacity (experiments/load.py)
    burstiness: float = 1.0  # gamma shape; 1 = Poisson, < 1 burstier
    classes: tuple[LengthClass, ...] = ()
    min_output_tokens: int = 32
    max_output_tokens: int = 64
    trace: TraceConfig = field(default_factory=TraceConfig)


@dataclass(frozen=True)
class SloConfig:
    ttft_s: float | None = 1.0
    tpot_s: float | None = 0.05  # per-request mean gap (the chapter's "ITL")
    itl_p99_s: float | None = None  # per-request p99 of its token gaps
    # A scaled SLO (conf/slo/*_scaled.yaml) gives multiples of this machine's own step times instead
    # of seconds; experiments/slo.py turns each into the seconds above before the run (it overwrites
    # them). null: that bound is the seconds above as given.
    ttft_prefill_multiple: float | None = None  # x the one-pass prefill of the workload's longest prompt
    tpot_decode_multiple: float | None = None  # x a decode step at full batch of the longest requests
    itl_p99_decode_multiple: float | None = None  # the same step, for the per-request p99 gap


@dataclass(frozen=True)
class TrackingConfig:
    enabled: bool = True
    tracking_uri: str = ""  # "" = MLFLOW_TRACKING_URI, else MLflow's default: sqlite:///<current dir>/mlflow.db
    experiment_name: str = "chunklab"
    run_name: str = ""  # "" = named from what the sweep varies (budget=64), or the experiment
    progress: bool = True
    system_metrics_interval_s: float = 1.0  # CPU and memory sampled into the run; 0 = off


@dataclass(frozen=True)
class RooflineEfficiency:
    """What share of the spec sheet a device reaches, per kind of work (cost_models/roofline.py).
    Each hardware preset says where its numbers come from (`source`)."""
    gemm_max: float = 0.0  # of peak FLOP/s, reached by GEMMs with many rows
    gemm_half_rows: float = 0.0  # rows at which a GEMM reaches half of gemm_max
    weight_bandwidth: float = 0.0  # of memory bandwidth, reading weights (small-row GEMMs)
    elementwise_bandwidth: float = 0.0  # of memory bandwidth: norms, RoPE, activation, residual adds
    kernel_floor_s: float = 0.0  # the least time of one elementwise kernel
    attention_prefill: float = 0.0  # of peak FLOP/s, flash attention over prefill query-key pairs
    attention_decode_bandwidth: float = 0.0  # of memory bandwidth, decode attention reading K/V
    step_overhead_s: float = 0.0  # per step: scheduling, sampling, launches (not in any kernel time)
    source: str = ""


@dataclass(frozen=True)
class HardwareConfig:
    """The device a run's step times belong to (conf/hardware/).

    cpu: this machine, measured, or predicted by a calibrated profile (engine.profile).
    A GPU preset: the vendor's spec sheet, priced by the roofline cost model (simulated runs)."""
    name: str = "cpu"
    cost_model: str = "profile"  # a cost model's name (cost_models/, COST_MODELS): profile (engine.profile), roofline (specs)
    description: str = "this machine's CPU"
    spec_source: str = ""  # where the figures below come from
    peak_dense_tflops: dict[str, float] = field(default_factory=dict)  # per model dtype, no sparsity
    memory_bandwidth_gb_per_s: float = 0.0
    memory_gb: float = 0.0
    memory_utilization: float = 0.9  # engine.num_blocks=0: the KV pool is this share of memory, less
    # weights and activations (vLLM's gpu_memory_utilization)
    runtime_reserved_gb: float = 0.0  # CUDA context and allocator slack outside the pool (assumed)
    efficiency: RooflineEfficiency = field(default_factory=RooflineEfficiency)
    # Every predicted step's seconds times this: the device running this much slower than its
    # cost model says (the fidelity stage sets each simulated repeat's from a speed sentinel read
    # beside the measured one, calibration/sentinel.py). 1: the cost model as it is.
    step_time_scale: float = 1.0


@dataclass(frozen=True)
class TopologyConfig:
    """How many engines serve the request stream, and in which roles (conf/topology/, src/chunklab/topology/).

    single: one engine (every run before clusters); replicas: `replicas` colocated engines behind the
    router; disaggregated: `prefill` engines run prompts and produce the first token, the KV moves over
    the link to one of `decode` engines, which generate the rest."""
    name: str = "single"  # a topology's name (topology/cluster.py, TOPOLOGIES)
    replicas: int = 1  # replicas: engines, each with its own scheduler, block manager and executor
    prefill: int = 1  # disaggregated: prefill instances
    decode: int = 1  # disaggregated: decode instances
    prefill_budget: int | None = None  # disaggregated: the prefill pool's token budget; null: scheduler.budget
    decode_num_blocks: int | None = None  # disaggregated: each decode instance's KV blocks; null: engine.num_blocks


@dataclass(frozen=True)
class RouterConfig:
    """Which instance an arriving request goes to (conf/router/, topology/routers/: one class per file)."""
    name: str = "round_robin"  # a router's name (topology/routers/, ROUTERS)
    decode: str = ""  # disaggregated: the router that picks the decode instance; "": the same as name
    seed: int = 0  # power_of_two's draws


@dataclass(frozen=True)
class LinkConfig:
    """What a KV transfer between a prefill and a decode instance costs (conf/link/, topology/links.py):
    seconds = bytes / bandwidth + latency."""
    name: str = "nvlink4"
    bandwidth_gb_per_s: float = 450.0  # one direction, 10^9 bytes/s
    latency_s: float = 5e-6  # per transfer
    spec_source: str = ""  # where the bandwidth comes from
    latency_source: str = ""  # where the latency comes from (or that it is assumed)
    # the lowest rate reported in public for this link with large messages, one direction (None: none
    # found; docs/production-scale.md says what each is): the report prices the transfers at it too
    published_gb_per_s: float | None = None
    published_source: str = ""


@dataclass(frozen=True)
class ServingConfig:
    """The system under test: what serves the requests (model, engines, their scheduler, the hardware
    and its cost model, the topology, its routers and link), without what is asked of it (workload,
    SLO) or how the run is recorded. What builds engines and clusters takes this, never the whole
    RunConfig: RunConfig.serving gives it."""
    model: ModelConfig
    engine: EngineConfig
    scheduler: SchedulerConfig
    hardware: HardwareConfig
    topology: TopologyConfig
    router: RouterConfig
    link: LinkConfig


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    slowdown: bool = False  # also measure each request class alone, for slowdown metrics (~2 s)
    # Real-engine jobs launched in parallel on one machine slow each other and corrupt every
    # timing: refused unless each job has its own machine (SLURM) or this is set.
    allow_parallel_measurements: bool = False

    @property
    def serving(self) -> ServingConfig:
        return ServingConfig(self.model, self.engine, self.scheduler, self.hardware, self.topology, self.router,
                             self.link)


# -- validation ----------------------------------------------------------------

def _check(ok: bool, key: str, value, why: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r}: {why}")


def _one_of(key: str, value, allowed) -> None:
    _check(value in allowed, key, value, f"must be one of {', '.join(allowed)}")


def validate(cfg: RunConfig) -> None:
    m, e, s, w, slo = cfg.model, cfg.engine, cfg.scheduler, cfg.workload, cfg.slo
    for key in ("vocab_size", "num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim", "mlp_hidden", "max_seq_len"):
        _check(getattr(m, key) >= 1, f"model.{key}", getattr(m, key), "must be >= 1")
    _check(m.num_heads % m.num_kv_heads == 0, "model.num_kv_heads", m.num_kv_heads, "must divide model.num_heads")
    _check(m.head_dim % 2 == 0, "model.head_dim", m.head_dim, "must be even (RoPE)")
    _check(m.init_std > 0, "model.init_std", m.init_std, "must be > 0")
    _one_of("model.dtype", m.dtype, ("float32", "float64", "bfloat16"))
    _one_of("model.attention", m.attention, ("sdpa", "naive"))
    _one_of("engine.device", e.device, ("cpu", "cuda"))
    _one_of("engine.clock", e.clock, ("replay", "wall"))
    _one_of("engine.linear_library", e.linear_library, ("auto", "mkl", "onednn", "panels"))
    _one_of("engine.prefill_attention", e.prefill_attention, ("paged", "sdpa"))
    _check(e.threads >= 0, "engine.threads", e.threads, "must be >= 0")
    _check(e.block_size >= 1, "engine.block_size", e.block_size, "must be >= 1")
    _check(e.num_blocks >= 0, "engine.num_blocks", e.num_blocks, "must be >= 1, or 0 (sized from hardware memory)")
    _check(e.temperature >= 0, "engine.temperature", e.temperature, "must be >= 0")
    _check(s.max_num_seqs >= 1, "scheduler.max_num_seqs", s.max_num_seqs, "must be >= 1")
    _check(s.budget >= s.max_num_seqs, "scheduler.budget", s.budget,
           f"must be >= scheduler.max_num_seqs ({s.max_num_seqs}) so every running sequence can decode")
    _check(s.max_partial_prefills >= 1, "scheduler.max_partial_prefills", s.max_partial_prefills, "must be >= 1")
    _check(s.long_prefill_threshold >= 0, "scheduler.long_prefill_threshold", s.long_prefill_threshold, "must be >= 0")
    _check(s.pressure_budget_tokens >= s.max_num_seqs, "scheduler.pressure_budget_tokens", s.pressure_budget_tokens,
           f"must be >= scheduler.max_num_seqs ({s.max_num_seqs}) so every running sequence can decode")
    _check(s.gap_target_s is None or s.gap_target_s > 0, "scheduler.gap_target_s", s.gap_target_s, "must be > 0, or null")
    _check(s.gap_target_kind in (None, "step", "mean"), "scheduler.gap_target_kind", s.gap_target_kind,
           "must be step, mean or null")
    _validate_hardware(cfg.hardware, cfg.engine, cfg.model)
    _validate_topology(cfg.topology, cfg.link, cfg.scheduler, cfg.engine, cfg.slowdown)
    _validate_workload(w, m)
    for key in ("ttft_s", "tpot_s", "itl_p99_s", "ttft_prefill_multiple", "tpot_decode_multiple",
                "itl_p99_decode_multiple"):
        v = getattr(slo, key)
        _check(v is None or v > 0, f"slo.{key}", v, "must be > 0 or null")


def _validate_hardware(h: HardwareConfig, e: EngineConfig, m: ModelConfig) -> None:
    _check(h.step_time_scale > 0, "hardware.step_time_scale", h.step_time_scale, "must be > 0")
    if h.cost_model == "roofline":
        _check(m.dtype in h.peak_dense_tflops, "model.dtype", m.dtype,
               f"hardware={h.name} has no peak for it (has {', '.join(h.peak_dense_tflops) or 'none'})")
        _check(h.memory_bandwidth_gb_per_s > 0, "hardware.memory_bandwidth_gb_per_s", h.memory_bandwidth_gb_per_s,
               f"must be > 0 for hardware.cost_model=roofline (hardware={h.name})")
        _check(h.efficiency.gemm_max > 0, "hardware.efficiency.gemm_max", h.efficiency.gemm_max,
               f"must be > 0 for hardware.cost_model=roofline (hardware={h.name})")
        _check(e.executor == "simulated", "hardware", h.name,
               "is a spec sheet, priced by the roofline cost model: add engine=simulated "
               "(measured runs time this machine: hardware=cpu)")
    _check(0 < h.memory_utilization <= 1, "hardware.memory_utilization", h.memory_utilization, "must be in (0, 1]")
    _check(e.num_blocks >= 1 or h.memory_gb > 0, "engine.num_blocks", e.num_blocks,
           f"0 sizes the pool from the hardware's memory, and hardware={h.name} gives none (hardware.memory_gb)")


def num_instances(t: TopologyConfig) -> int:
    return {"single": 1, "replicas": t.replicas}.get(t.name, t.prefill + t.decode)


def _validate_topology(t: TopologyConfig, link: LinkConfig, s: SchedulerConfig, e: EngineConfig, slowdown: bool) -> None:
    _check(t.replicas >= 1, "topology.replicas", t.replicas, "must be >= 1")
    _check(t.name != "single" or t.replicas == 1, "topology.replicas", t.replicas,
           "topology=single is one engine: use topology=replicas")
    _check(t.prefill >= 1, "topology.prefill", t.prefill, "must be >= 1: no prefill instances, no first token")
    _check(t.decode >= 1, "topology.decode", t.decode, "must be >= 1: no decode instances, nowhere to send the KV")
    _check(t.prefill_budget is None or t.prefill_budget >= s.max_num_seqs, "topology.prefill_budget",
           t.prefill_budget, f"must be >= scheduler.max_num_seqs ({s.max_num_seqs}), or null")
    _check(t.decode_num_blocks is None or t.decode_num_blocks >= 1, "topology.decode_num_blocks",
           t.decode_num_blocks, "must be >= 1, or null (engine.num_blocks)")
    if t.name != "single" and e.executor != "simulated":  # measured: one core per instance
        key, n = ("topology.replicas", t.replicas) if t.name == "replicas" else ("topology.prefill", t.prefill)
        cores = len(os.sched_getaffinity(0))
        _check(num_instances(t) <= cores, key, n,
               f"a measured cluster runs each instance on its own core: {num_instances(t)} instances, "
               f"this machine gives the run {cores} cores (simulate it: engine=simulated)")
        _check(not slowdown, "slowdown", slowdown,
               "is not measured for a measured cluster (simulate it: engine=simulated)")
    _check(link.bandwidth_gb_per_s > 0, "link.bandwidth_gb_per_s", link.bandwidth_gb_per_s,
           f"must be > 0 (link={link.name})")
    _check(link.latency_s >= 0, "link.latency_s", link.latency_s, f"must be >= 0 (link={link.name})")
    _check(link.published_gb_per_s is None or link.published_gb_per_s > 0, "link.published_gb_per_s",
           link.published_gb_per_s, f"must be > 0 or null (link={link.name})")


def _validate_workload(w: WorkloadConfig, m: ModelConfig) -> None:
    _one_of("workload.kind", w.kind, ("synthetic", "trace"))
    _check(w.num_requests is not None or w.kind == "trace", "workload.num_requests", w.num_requests,
           "null (every row) is only for traces; a synthetic workload needs a number")
    _check(w.num_requests is None or w.num_requests >= 1, "workload.num_requests", w.num_requests, "must be >= 1")
    _check(w.num_requests is None or w.num_requests <= MAX_REQUESTS, "workload.num_requests", w.num_requests,
           f"at most {MAX_REQUESTS:,} a run: every request's record and token times stay in memory until the run "
           f"writes its tables (~6.4 KB each, ~6.5 GB at the limit); split the work over seeds or runs")
    _one_of("workload.arrival", w.arrival, ("poisson", "gamma", "all_at_once"))
    if w.kind == "synthetic" and w.arrival != "all_at_once":
        _check(w.rate_per_s is None or w.load is None, "workload.load", w.load,
               f"give workload.load or workload.rate_per_s ({w.rate_per_s}), not both")
        _check(w.rate_per_s is not None or w.load is not None, "workload.rate_per_s", w.rate_per_s,
               "needs a rate, or workload.load (a fraction of capacity)")
    _check(w.load is None or w.kind == "synthetic", "workload.load", w.load,
           "is for synthetic workloads; a trace's rate comes from its timestamps (scale it with workload.trace.time_scale)")
    _check(w.rate_per_s is None or w.rate_per_s > 0, "workload.rate_per_s", w.rate_per_s, "must be > 0")
    _check(w.load is None or 0 < w.load <= 10, "workload.load", w.load, "must be > 0 and <= 10 (x capacity)")
    _check(w.burstiness > 0, "workload.burstiness", w.burstiness, "must be > 0")
    _check(1 <= w.min_output_tokens <= w.max_output_tokens, "workload.min_output_tokens", w.min_output_tokens,
           f"must be >= 1 and <= workload.max_output_tokens ({w.max_output_tokens})")
    if w.kind == "synthetic":
        _check(len(w.classes) > 0, "workload.classes", list(w.classes), "needs at least one length class")
        for i, c in enumerate(w.classes):
            key = f"workload.classes[{i}]"
            _check(c.weight > 0, f"{key}.weight", c.weight, "must be > 0")
            _check(1 <= c.min_tokens <= c.max_tokens, f"{key}.min_tokens", c.min_tokens,
                   f"must be >= 1 and <= max_tokens ({c.max_tokens})")
    t = w.trace
    if w.kind == "trace":
        _check(bool(t.path), "workload.trace.path", t.path, "is required when workload.kind=trace")
        _check(Path(t.path).is_file(), "workload.trace.path", t.path, "no such file")
    _check(t.start_offset >= 0, "workload.trace.start_offset", t.start_offset, "must be >= 0")
    _check(t.time_scale > 0, "workload.trace.time_scale", t.time_scale, "must be > 0")
    _check(t.length_scale is None or t.length_scale > 0, "workload.trace.length_scale", t.length_scale, "must be > 0")
    _one_of("workload.trace.overlong", t.overlong, ("clip", "reject"))


TRACE_FIT_TOKENS = 4096  # workload.trace.length_scale=null: this many trace tokens fill the model's context


def trace_length_scale(t: TraceConfig, max_seq_len: int) -> float:
    """The length scale a trace replays at: as given, or (null) real lengths where the model's
    context holds TRACE_FIT_TOKENS, else context / TRACE_FIT_TOKENS (TinyGPT: 0.5)."""
    if t.length_scale is not None:
        return t.length_scale
    return min(1.0, max_seq_len / TRACE_FIT_TOKENS)
