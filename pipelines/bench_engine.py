"""Engine micro-benchmark: prints each figure and its ratio to this machine's matmul rate.

    python pipelines/bench_engine.py [--repeats N] [--threads T] [--eager]
"""
from __future__ import annotations

import argparse

import torch

from chunklab import bench
from chunklab.config import EngineConfig, ModelConfig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompt-tokens", type=int, default=1536)
    ap.add_argument("--eager", action="store_true", help="eager torch ops (engine.compile=false), not the fused forward")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, engine_cfg = ModelConfig(), EngineConfig(compile=not args.eager)
    peak = bench.matmul_gflops()
    path = bench.make_engine(model, engine_cfg, budget=8).executor.forward_path
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; matmul {peak:.1f} GFLOP/s; {path} forward")
    flops = bench.prefill_flops(model, args.prompt_tokens)
    print(f"\nprefill of {args.prompt_tokens} tokens ({flops / 1e9:.2f} GFLOP), median of {args.repeats}:")
    print(f"{'attention':>9} {'chunk':>6} {'passes':>6} {'ms':>9} {'GFLOP/s':>8} {'of matmul':>9} {'vs 1 pass':>9}")
    configs = [(impl, chunk) for impl in bench.ATTENTIONS for chunk in (args.prompt_tokens, 256, 64)]
    times = bench.prefill_split(model, configs, args.prompt_tokens, args.repeats, engine_cfg)
    for (impl, chunk), samples in times.items():
        ms = bench.median_ms(samples)
        base = bench.median_ms(times[(impl, args.prompt_tokens)])
        gflops = flops / ms / 1e6
        passes = -(-args.prompt_tokens // chunk)
        print(f"{impl:>9} {chunk:>6} {passes:>6} {ms:>9.1f} {gflops:>8.1f} {gflops / peak:>9.2f} {ms / base:>8.2f}x")
    dec = bench.median_ms(bench.decode_step_s(model, engine_cfg, batch=8, context=1600, repeats=20))
    print(f"\ndecode step, batch 8, ~1600 tokens of context: {dec:.2f} ms")
    ovh = bench.median_ms(bench.step_overhead_s(model, engine_cfg, repeats=200))
    print(f"step with one decode token at tiny context: {ovh:.3f} ms")


if __name__ == "__main__":
    main()
