"""Engine micro-benchmark: prints each figure and its ratio to this machine's matmul rate.

    python pipelines/bench_engine.py [--repeats N] [--threads T] [--eager]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics

import torch

from chunklab import bench
from chunklab.config import EngineConfig, ModelConfig


def chunking_by_threads(model: ModelConfig, engine_cfg: EngineConfig, prompt_tokens: int, chunk_tokens: int,
                        rounds: int, thread_counts: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """Where a chunked prefill's extra time goes: per thread count (engine.threads), one prompt served
    in one pass and in chunks of chunk_tokens through bench.prefill_split. Each round runs every thread
    count and, at each, both splits (both orders flipped every round); "ratio" is the median over
    rounds of each round's chunked / one pass, "one_s" and "chunked_s" the medians. A ratio that
    grows with threads is parallel overhead (work between parallel regions, paid once a chunk); one
    that does not is the chunks' own cost. torch's thread count, which each engine sets, is restored."""
    impl = engine_cfg.prefill_attention
    splits = [(impl, prompt_tokens), (impl, chunk_tokens)]
    samples = {t: {"one_s": [], "chunked_s": [], "ratio": []} for t in thread_counts}
    before = torch.get_num_threads()
    try:
        for round_ in range(rounds):
            for threads in thread_counts if round_ % 2 else thread_counts[::-1]:
                took = bench.prefill_split(model, splits if round_ % 2 else splits[::-1], prompt_tokens, 1,
                                           dataclasses.replace(engine_cfg, threads=threads))
                one, chunked = took[splits[0]][0], took[splits[1]][0]
                samples[threads]["one_s"].append(one)
                samples[threads]["chunked_s"].append(chunked)
                samples[threads]["ratio"].append(chunked / one)
    finally:
        torch.set_num_threads(before)
    return {t: {name: statistics.median(xs) for name, xs in by.items()} for t, by in samples.items()}


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
    threads = torch.get_num_threads()
    if threads > 1:
        chunk = 64
        n = -(-args.prompt_tokens // chunk)
        print(f"\n{n} x {chunk} against one pass, by threads (alternated; medians of {args.repeats} rounds):")
        print(f"{'threads':>7} {'one pass ms':>11} {f'{n} x {chunk} ms':>11} {'ratio':>6} {'speedup 1 pass':>14} "
              f"{'speedup chunks':>14}")
        by = chunking_by_threads(model, engine_cfg, args.prompt_tokens, chunk, args.repeats, (1, threads))
        for t, r in by.items():
            print(f"{t:>7} {1e3 * r['one_s']:>11.1f} {1e3 * r['chunked_s']:>11.1f} {r['ratio']:>6.3f} "
                  f"{by[1]['one_s'] / r['one_s']:>14.2f} {by[1]['chunked_s'] / r['chunked_s']:>14.2f}")


if __name__ == "__main__":
    main()
