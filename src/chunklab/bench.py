"""Micro-benchmarks of the engine on this machine: prefill split, decode step,
per-step overhead, and the machine's own matmul rate, measured in one process."""
from __future__ import annotations

import dataclasses
import statistics
import time

import torch

from chunklab.config import EngineConfig, ModelConfig, SchedulerConfig
from chunklab.engine.clock import ReplayClock
from chunklab.engine.engine import LLMEngine
from chunklab.engine.sequence import Request
from chunklab.engine.serve import serve
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


def prefill_flops(m: ModelConfig, num_tokens: int) -> float:
    """FLOPs of one causal prefill of num_tokens (matmuls and attention; one LM-head row)."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    linear = m.d_model * (q + 2 * kv) + q * m.d_model + 3 * m.d_model * m.mlp_hidden
    attention = 4 * m.num_heads * m.head_dim * num_tokens * (num_tokens + 1) / 2
    return m.num_layers * (2 * num_tokens * linear + attention) + 2 * m.d_model * m.vocab_size


def make_engine(model: ModelConfig, engine: EngineConfig, **sched) -> LLMEngine:
    return LLMEngine(model, engine, SchedulerConfig(**sched), ReplayClock())


def prefill_split(engine: LLMEngine, prompt_tokens: int, repeats: int) -> list[float]:
    """Seconds to prefill one prompt at the engine's budget (chunk size), one sample each."""
    req = Request(0, 0.0, prompt_ids(0, 0, prompt_tokens, 256), 1)
    return timed(lambda: serve(engine, [req]), repeats)


def decode_step_s(model: ModelConfig, engine_cfg: EngineConfig, batch: int, context: int, repeats: int) -> list[float]:
    """Durations of decode-only steps at `batch` sequences with ~`context` cached tokens."""
    engine = make_engine(model, engine_cfg, budget=batch * context + batch, max_num_seqs=batch,
                         max_partial_prefills=batch)
    reqs = [Request(i, 0.0, prompt_ids(1, i, context, 256), repeats + 2) for i in range(batch)]
    result = serve(engine, reqs)
    steps = [s.duration_s for s in result.steps if s.num_prefill_tokens == 0 and s.num_decode_tokens == batch]
    return steps[1:]  # the first decode step pays one-off allocations


def step_overhead_s(model: ModelConfig, engine_cfg: EngineConfig, repeats: int) -> list[float]:
    """Durations of steps with one decode token at tiny context."""
    engine = make_engine(model, engine_cfg, budget=8)
    result = serve(engine, [Request(0, 0.0, (1, 2), repeats + 2)])
    return [s.duration_s for s in result.steps[2:]]


def median_ms(xs: list[float]) -> float:
    return 1e3 * statistics.median(xs)


def with_attention(model: ModelConfig, impl: str) -> ModelConfig:
    return dataclasses.replace(model, attention=impl)
