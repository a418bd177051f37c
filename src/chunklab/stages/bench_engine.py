"""Engine micro-benchmark (`make bench`): each figure and its ratio to this machine's matmul rate.

    python -m chunklab.stages.bench_engine [--repeats N] [--threads T] [--prompt-tokens N] [--eager] [--isa avx2]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import torch

from chunklab import bench, isa
from chunklab.calibration.machine import machine_profile_path
from chunklab.config import ConfigError, EngineConfig, ModelConfig
from chunklab.cost_models.linear import load_cost_model
from chunklab.engine.policies import BUDGETS
from chunklab.engine.executors.model_runner import linear_plan
from chunklab.model.linear_library import linear_shapes


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


def linear_layers_s(model: ModelConfig, engine_cfg: EngineConfig, rows: int, repeats: int) -> tuple[float, str]:
    """Seconds of one pass's linear layers at `rows` rows (every layer's QKV, output, gate-up and down;
    not the LM head) through the library this machine's plan picks at that size, each GEMM timed
    alone (median of `repeats`, weights prepacked) and summed: the part of a prefill pass that is
    GEMM, without the fused path's epilogues (norms, residual adds, SiLU-mul) or anything between."""
    # the eager forward (engine.compile=false) runs every linear layer through ATen's F.linear
    library = linear_plan(model, engine_cfg).library_for(rows) if engine_cfg.compile else "mkl"
    per_layer = sum(statistics.median(bench.timed(bench.gemm_fn(library, torch.randn(rows, k), torch.randn(n, k)),
                                                  repeats, warmup=3))
                    for k, n in linear_shapes(model))
    return model.num_layers * per_layer, library


def where_prefill_time_goes(model: ModelConfig, engine_cfg: EngineConfig, prompt_tokens: int,
                            chunk_tokens: int, repeats: int, peak_gflops: float) -> list[dict]:
    """Per split (one pass, chunks of chunk_tokens): the whole prefill on the paged path (median of
    `repeats`), its linear layers timed alone at that chunk's rows (linear_layers_s, times the
    passes), and the rest (attention, RoPE, the KV writes, norms and epilogues outside a lone GEMM,
    the LM head, per-step overhead); each part's FLOP rate. What separates a prefill from the
    machine's GEMM peak, and a chunked prefill from one pass, read off one run."""
    total_flops = bench.prefill_flops(model, prompt_tokens)
    linear_flops = 2 * prompt_tokens * model.num_layers * sum(k * n for k, n in linear_shapes(model))
    splits = [("paged", prompt_tokens), ("paged", chunk_tokens)]
    whole = bench.prefill_split(model, splits, prompt_tokens, repeats, engine_cfg)
    out = []
    for _, chunk in splits:
        passes = -(-prompt_tokens // chunk)
        total_s = statistics.median(whole[("paged", chunk)])
        linear_s, library = linear_layers_s(model, engine_cfg, chunk, repeats)
        linear_s *= passes
        out.append({"split": f"{passes}x{chunk}", "library": library, "total_ms": 1e3 * total_s,
                    "linear_ms": 1e3 * linear_s, "rest_ms": 1e3 * (total_s - linear_s),
                    "linear_gflops": linear_flops / linear_s / 1e9,
                    # the FLOPs outside the linear layers (attention, one LM-head row) over the rest's time
                    "rest_gflops": (total_flops - linear_flops) / max(total_s - linear_s, 1e-9) / 1e9,
                    "of_peak": total_flops / total_s / 1e9 / peak_gflops})
    return out


def report(repeats: int, threads: int, prompt_tokens: int, eager: bool) -> None:
    """Prints every figure: prefill splits per attention, a decode step, the step overhead, where a
    prefill's time goes, and (with more than one thread) chunking against one pass by threads.
    threads: torch's thread count (0: as it is); eager: engine.compile=false, not the fused forward."""
    if threads:
        torch.set_num_threads(threads)
    model, engine_cfg = ModelConfig(), EngineConfig(compile=not eager)
    peak = bench.matmul_gflops()
    path = bench.make_engine(model, engine_cfg, budget=8).executor.forward_path
    print(f"instruction set: {isa.describe()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; matmul {peak:.1f} GFLOP/s; {path} forward")
    flops = bench.prefill_flops(model, prompt_tokens)
    print(f"\nprefill of {prompt_tokens} tokens ({flops / 1e9:.2f} GFLOP), median of {repeats}:")
    print(f"{'attention':>9} {'chunk':>6} {'passes':>6} {'ms':>9} {'GFLOP/s':>8} {'of matmul':>9} {'vs 1 pass':>9}")
    configs = [(impl, chunk) for impl in bench.ATTENTIONS for chunk in (prompt_tokens, 256, 64)]
    times = bench.prefill_split(model, configs, prompt_tokens, repeats, engine_cfg)
    for (impl, chunk), samples in times.items():
        ms = bench.median_ms(samples)
        base = bench.median_ms(times[(impl, prompt_tokens)])
        gflops = flops / ms / 1e6
        passes = -(-prompt_tokens // chunk)
        print(f"{impl:>9} {chunk:>6} {passes:>6} {ms:>9.1f} {gflops:>8.1f} {gflops / peak:>9.2f} {ms / base:>8.2f}x")
    dec = bench.median_ms(bench.decode_step_s(model, engine_cfg, batch=8, context=1600, repeats=20))
    print(f"\ndecode step, batch 8, ~1600 tokens of context: {dec:.2f} ms")
    ovh = bench.median_ms(bench.step_overhead_s(model, engine_cfg, repeats=200))
    print(f"step with one decode token at tiny context: {ovh:.3f} ms")
    budget_policies(model, engine_cfg)
    chunk = 64
    print(f"\nwhere a {prompt_tokens}-token prefill's time goes (paged path; linear layers timed alone "
          f"through the plan's library, medians of {repeats}):")
    print(f"{'split':>7} {'library':>7} {'total ms':>9} {'linear ms':>9} {'rest ms':>8} {'linear GFLOP/s':>14} "
          f"{'rest GFLOP/s (attention)':>25} {'of matmul':>9}")
    for r in where_prefill_time_goes(model, engine_cfg, prompt_tokens, chunk, repeats, peak):
        print(f"{r['split']:>7} {r['library']:>7} {r['total_ms']:>9.1f} {r['linear_ms']:>9.1f} {r['rest_ms']:>8.1f} "
              f"{r['linear_gflops']:>14.1f} {r['rest_gflops']:>25.1f} {r['of_peak']:>9.2f}")
    running_threads = torch.get_num_threads()
    if running_threads > 1:
        chunk = 64
        n = -(-prompt_tokens // chunk)
        print(f"\n{n} x {chunk} against one pass, by threads (alternated; medians of {repeats} rounds):")
        print(f"{'threads':>7} {'one pass ms':>11} {f'{n} x {chunk} ms':>11} {'ratio':>6} {'speedup 1 pass':>14} "
              f"{'speedup chunks':>14}")
        by = chunking_by_threads(model, engine_cfg, prompt_tokens, chunk, repeats, (1, running_threads))
        for t, r in by.items():
            print(f"{t:>7} {1e3 * r['one_s']:>11.1f} {1e3 * r['chunked_s']:>11.1f} {r['ratio']:>6.3f} "
                  f"{by[1]['one_s'] / r['one_s']:>14.2f} {by[1]['chunked_s'] / r['chunked_s']:>14.2f}")


def budget_policies(model: ModelConfig, engine_cfg: EngineConfig) -> None:
    """Prints what each budget policy costs a step (bench.budget_policy_step_s) on this machine's
    cached profile; one line saying there is none otherwise (nothing is calibrated here)."""
    path = machine_profile_path(model, engine_cfg)
    if not path.is_file():
        print(f"budget policies: not timed, no profile of this machine cached at {path} (`dvc repro calibrate`)")
        return
    cost, _ = load_cost_model(model, dataclasses.replace(engine_cfg, profile=str(path)), required=True)
    for policy in BUDGETS:
        us = 1e3 * bench.median_ms(bench.budget_policy_step_s(cost, engine_cfg.mixed_batch, policy, repeats=20))
        print(f"budget policy {policy}: {us:.2f} us a step (8 decodes at 1,000 tokens, a 2,000-token prompt waiting)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--prompt-tokens", type=int, default=1536)
    ap.add_argument("--eager", action="store_true", help="eager torch ops (engine.compile=false), not the fused forward")
    ap.add_argument("--isa", default="native", help=f"run capped to an instruction set: {', '.join(isa.CAPS)}")
    args = ap.parse_args(argv)
    try:
        isa.reexec_under(args.isa, ["-m", "chunklab.stages.bench_engine", *(sys.argv[1:] if argv is None else argv)])
    except ConfigError as err:
        ap.exit(2, f"chunklab: error: {err}\n")
    report(args.repeats, args.threads, args.prompt_tokens, args.eager)


if __name__ == "__main__":
    main()
