"""Micro-benchmarks of the engine on this machine: prefill split, decode step,
per-step overhead, and the machine's own matmul rate, measured in one process."""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections import deque

import torch

from chunklab.config import EngineConfig, ModelConfig, SchedulerConfig
from chunklab.cost_models import CostModel
from chunklab.engine.block_manager import BlockManager
from chunklab.engine.build import build_engine
from chunklab.engine.engine import LLMEngine, step_time_predictor
from chunklab.engine.policies import budget_policy
from chunklab.engine.replay import replay
from chunklab.engine.scheduler import Scheduler
from chunklab.engine.sequence import Request, Sequence
from chunklab.model.hf_export import to_llama
from chunklab.model.linear_plan import linear_shapes, onednn_linear, pack
from chunklab.model.native import PREFILL_ATTENTION, NativeUnavailable, load_extension
from chunklab.model.sizes import DTYPE_BYTES, kv_bytes_per_token, num_parameters
from chunklab.model.tiny_gpt import TinyGPT
from chunklab.workload.synthetic import prompt_ids


def timed(fn, repeats: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def matmul_gflops(n: int = 1024, repeats: int = 20, dtype=torch.float32) -> float:
    """Best-of-N rate of an n x n x n matmul: the machine's practical compute peak."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    return 2 * n**3 / min(timed(lambda: a @ b, repeats, warmup=3)) / 1e9


GEMM_LIBRARIES = ("mkl", "onednn", "panels")


def gemm_gflops(library: str, rows: int, k: int, n: int, repeats: int = 20) -> float:
    """Best-of-N fp32 rate of y = x @ w.T (rows x k, n x k) through one library. mkl: ATen's dense
    F.linear (MKL sgemm in the x86 CPU wheel); onednn: torch's own mkldnn linear with the weight
    prepacked once, as vLLM's CPU backend runs linear layers; panels: the fused forward's own
    kernel (csrc/panel_linear.cpp) on its panel-packed weight. Which is fastest depends on the CPU."""
    x, w = torch.randn(rows, k), torch.randn(n, k)
    fn = gemm_fn(library, x, w)
    return 2 * rows * k * n / min(timed(fn, repeats, warmup=3)) / 1e9


def gemm_fn(library: str, x: torch.Tensor, w: torch.Tensor):
    """A callable computing x @ w.T through `library` (the weight prepacked once for oneDNN and panels)."""
    if library == "mkl":
        return lambda: torch.nn.functional.linear(x, w)
    if library == "panels":
        ext = load_extension()
        panels = ext.pack_panels(w.t().contiguous())
        return lambda: ext.panel_linear(x, panels, w.shape[0])
    packed = pack(w.t(), rows_hint=x.shape[0])
    return lambda: onednn_linear(x, packed)


def gemm_shapes(m: ModelConfig, rows: int) -> list[tuple[int, int, int]]:
    """1024^3 and the model's own linear layers at `rows` rows (fused QKV, output, gate-up, down)."""
    return [(1024, 1024, 1024), *((rows, k, n) for k, n in linear_shapes(m))]


def gemm_peaks(m: ModelConfig, rows: int) -> dict[str, float]:
    """Per library, its best rate over gemm_shapes: the machine's fp32 GEMM peak through it
    (panels only where the fused forward is built)."""
    try:
        load_extension()
        libraries = GEMM_LIBRARIES
    except NativeUnavailable:
        libraries = tuple(lib for lib in GEMM_LIBRARIES if lib != "panels")
    return {lib: max(gemm_gflops(lib, *shape) for shape in gemm_shapes(m, rows)) for lib in libraries}


def prefill_flops(m: ModelConfig, num_tokens: int) -> float:
    """FLOPs of one causal prefill of num_tokens (matmuls and attention; one LM-head row)."""
    linear = sum(k * n for k, n in linear_shapes(m))  # weights per layer: a multiply-add each per token
    attention = 4 * m.num_heads * m.head_dim * num_tokens * (num_tokens + 1) / 2
    return m.num_layers * (2 * num_tokens * linear + attention) + 2 * m.d_model * m.vocab_size


# The attention a prefill chunk runs through: paged (the fused forward's causal kernel over the
# KV pool), sdpa (the fused forward, context gathered into ATen's SDPA), naive (the eager model's
# materialised score matrix: the chapter's kind of prefill).
ATTENTIONS = ("paged", "sdpa", "naive")


def set_attention(executor, impl: str) -> None:
    """Points an engine's ModelRunner at one of ATTENTIONS for its next steps. naive runs on the
    eager path only (its engine built with model.attention=naive); paged and sdpa on either."""
    if impl not in ATTENTIONS:
        raise ValueError(f"attention {impl!r}: expected one of {', '.join(ATTENTIONS)}")
    if (impl == "naive") != (executor.fused is None):
        raise ValueError(f"attention {impl!r} cannot run on the {executor.forward_path} path")
    executor.attention_impl = "naive" if impl == "naive" else "sdpa"
    if executor.fused is not None:
        executor.fused.prefill_attention = PREFILL_ATTENTION.index("sdpa" if impl == "sdpa" else "paged")


def make_engine(model: ModelConfig, engine: EngineConfig, **sched) -> LLMEngine:
    """A real engine on a replay clock with these scheduler settings."""
    return build_engine(model, dataclasses.replace(engine, executor="torch", clock="replay"), SchedulerConfig(**sched))


def prefill_split(model: ModelConfig, configs: list[tuple[str, int]], prompt_tokens: int,
                  repeats: int, engine_cfg: EngineConfig = EngineConfig()) -> dict[tuple[str, int], list[float]]:
    """Seconds to prefill one prompt for each (attention, chunk tokens) configuration (ATTENTIONS).

    One engine serves paged and sdpa (naive, an eager-only ablation, gets its own: the two
    paths keep their KV pools in different layouts), and configurations are interleaved
    round by round after a warm-up of each, so caches and slow drift of this shared
    machine hit all alike.
    """
    budget = max(c for _, c in configs)
    engines = {naive: make_engine(dataclasses.replace(model, attention="naive") if naive else model, engine_cfg,
                                  budget=budget, max_num_seqs=1)
               for naive in {impl == "naive" for impl, _ in configs}}
    req = Request(0, 0.0, prompt_ids(0, 0, prompt_tokens, 256), 1)
    times = {c: [] for c in configs}
    for round_ in range(repeats + 1):
        for impl, chunk in configs:
            engine = engines[impl == "naive"]
            set_attention(engine.executor, impl)
            engine.scheduler.reconfigure(dataclasses.replace(engine.scheduler.config, budget=chunk))
            t0 = time.perf_counter()
            replay(engine, [req])
            if round_ > 0:  # round 0 is the warm-up
                times[(impl, chunk)].append(time.perf_counter() - t0)
    return times


def decode_step_s(model: ModelConfig, engine_cfg: EngineConfig, batch: int, context: int, repeats: int) -> list[float]:
    """Durations of decode-only steps at `batch` sequences with ~`context` cached tokens."""
    engine = make_engine(model, engine_cfg, budget=batch * context + batch, max_num_seqs=batch,
                         max_partial_prefills=batch)
    reqs = [Request(i, 0.0, prompt_ids(1, i, context, 256), repeats + 2) for i in range(batch)]
    result = replay(engine, reqs)
    steps = [s.duration_s for s in result.steps if s.num_prefill_tokens == 0 and s.num_decode_tokens == batch]
    return steps[1:]  # the first decode step pays one-off allocations


def step_overhead_s(model: ModelConfig, engine_cfg: EngineConfig, repeats: int) -> list[float]:
    """Durations of steps with one decode token at tiny context."""
    engine = make_engine(model, engine_cfg, budget=8)
    result = replay(engine, [Request(0, 0.0, (1, 2), repeats + 2)])
    return list(result.steps.columns["duration_s"][2:])


def budget_policy_step_s(cost_model: CostModel, mixed_batch: bool, policy: str, repeats: int,
                         decodes: int = 8, context: int = 1000, prompt_tokens: int = 2000) -> list[float]:
    """Seconds the budget policy takes to set one step's budget (scheduler.budget_policy; each sample
    the mean of 100 calls), on a state where the SLO-aware policy must solve for its chunk: `decodes`
    sequences decoding at `context` tokens, one `prompt_tokens` prompt waiting, a gap target the whole
    prompt would break (the cost model's decode-only step x 1.5)."""
    predict = step_time_predictor(cost_model, mixed_batch)
    target_s = 1.5 * predict([context + 1] * decodes, 0, 0)
    cfg = SchedulerConfig(budget=8192, budget_policy=policy, gap_target_s=target_s)
    staging = Scheduler(cfg, BlockManager(decodes * (context // 16 + 2) + 4, 16), predict)
    for i in range(decodes):
        staging.stage(Request(i, 0.0, (7,) * context, 8), context, decoding=True)
    running = list(staging.running)
    waiting = deque([Sequence(Request(decodes, 0.0, (7,) * prompt_tokens, 8))])
    chosen = budget_policy(cfg, predict)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(100):
            chosen.step_budget(running, waiting)
        out.append((time.perf_counter() - t0) / 100)
    return out


def median_ms(xs: list[float]) -> float:
    return 1e3 * statistics.median(xs)


def memory_bandwidth_gbs(num_bytes: int = 512 * 2**20, repeats: int = 10) -> float:
    """Best-of-N read bandwidth: a sum over a buffer far larger than any cache."""
    x = torch.ones(num_bytes // 4, dtype=torch.float32)
    return num_bytes / min(timed(lambda: x.sum(), repeats, warmup=2)) / 1e9


def decode_bytes(model: ModelConfig, batch: int, context: int) -> tuple[int, int]:
    """(weight bytes, KV bytes) one decode step must read at least once."""
    weights = num_parameters(model) * DTYPE_BYTES[model.dtype]
    return weights, batch * context * kv_bytes_per_token(model)


def overhead_by_finished(model: ModelConfig, engine_cfg: EngineConfig, num_requests: int) -> tuple[float, float]:
    """Median one-token step time over the first and the last tenth of num_requests
    tiny requests served one after another: flat if nothing grows with history."""
    engine = make_engine(model, engine_cfg, budget=8)
    reqs = [Request(i, float(i), (1, 2), 2) for i in range(num_requests)]
    steps = list(replay(engine, reqs).steps)
    tenth = len(steps) // 10
    return statistics.median(s.duration_s for s in steps[:tenth]), statistics.median(s.duration_s for s in steps[-tenth:])


def static_batch_prompts(batch: int, prompt_tokens: int) -> list[tuple[int, ...]]:
    return [prompt_ids(7, i, prompt_tokens, 256) for i in range(batch)]


def engine_batch_tokens_per_s(model: ModelConfig, engine_cfg: EngineConfig, prompts, new_tokens: int) -> float:
    """Our engine serving the prompts as requests that all arrive at once."""
    engine = make_engine(model, engine_cfg, budget=8192, max_num_seqs=len(prompts), max_partial_prefills=len(prompts))
    engine.warmup()
    reqs = [Request(i, 0.0, p, new_tokens) for i, p in enumerate(prompts)]
    t0 = time.perf_counter()
    replay(engine, reqs)
    return len(prompts) * new_tokens / (time.perf_counter() - t0)


def hf_generate_tokens_per_s(model: ModelConfig, prompts, new_tokens: int) -> float:
    """transformers' LlamaForCausalLM.generate on the same weights, one static batch, greedy."""
    llama = to_llama(TinyGPT.from_seed(model, model.seed))
    ids = torch.tensor([list(p) for p in prompts])
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  attention_mask=torch.ones_like(ids), pad_token_id=0)
    with torch.inference_mode():
        llama.generate(ids[:, :16], max_new_tokens=2, do_sample=False, pad_token_id=0)  # warm-up
        t0 = time.perf_counter()
        llama.generate(ids, **kwargs)
        return len(prompts) * new_tokens / (time.perf_counter() - t0)
