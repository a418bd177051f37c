"""Stage prefill_split (measured): one long prompt prefilled in passes of each chunk size, each
attention (bench.ATTENTIONS), against this machine's fp32 GEMM peak."""
from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from chunklab import bench
from chunklab.config import EngineConfig
from chunklab.hydra_compose import compose_config
from chunklab.metrics.conditions import conditions, conditions_line
from chunklab.stages.common import arguments, read_section, write_json
from chunklab.stages.typed_yaml import Section, no_overrides


@Section
class PrefillSplitParams:
    prompt_tokens: int
    chunk_tokens: list[int]
    attention: list[str]
    repeats: int
    overrides: list[str] = no_overrides()


def run(p: PrefillSplitParams, csv_path: Path, conditions_path: Path) -> None:
    """Writes the timings (one row per attention and chunk size) to csv_path and the run's
    conditions with the GEMM peaks to conditions_path."""
    cfg = compose_config(p.overrides)
    peaks_before = bench.gemm_peaks(cfg.model, p.prompt_tokens)
    flops = bench.prefill_flops(cfg.model, p.prompt_tokens)
    configs = [(impl, chunk) for impl in p.attention for chunk in p.chunk_tokens]
    timings = bench.prefill_split(cfg.model, configs, p.prompt_tokens, p.repeats)
    # The machine's fp32 GEMM peak: the best library (MKL, oneDNN or the fused forward's panels), each the better of a
    # measurement before and after, so one noisy moment of this shared VM cannot deflate it
    # (and inflate every fraction below).
    after = bench.gemm_peaks(cfg.model, p.prompt_tokens)
    peaks = {lib: max(peaks_before[lib], after[lib]) for lib in peaks_before}
    library = max(peaks, key=peaks.get)
    peak = peaks[library]
    rows = []
    for (impl, chunk), times in timings.items():
        med = statistics.median(times)
        rows.append({"attention": impl, "chunk_tokens": chunk, "passes": -(-p.prompt_tokens // chunk),
                     "median_ms": 1e3 * med, "min_ms": 1e3 * min(times), "max_ms": 1e3 * max(times),
                     "gflops": flops / med / 1e9, "fraction_of_matmul": flops / med / 1e9 / peak,
                     # each timed round's, in round order (rounds interleave every configuration: paired)
                     "times_ms": " ".join(f"{1e3 * t:.3f}" for t in times)})
        print(f"{impl:>5} chunk {chunk:>5}: {1e3 * med:8.1f} ms", flush=True)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(csv_path, index=False, float_format="%.4f")
    executor = bench.make_engine(cfg.model, EngineConfig()).executor
    cond = conditions(cfg, executor.model.num_parameters(),
                      forward_path=f"{executor.forward_path} (sdpa rows: prefill through ATen's SDPA; "
                                   "naive rows: eager)")
    cond["workload"] = f"one {p.prompt_tokens}-token prompt, {p.repeats} timed runs after a warm-up"
    write_json(conditions_path,
               cond | {"matmul_gflops": peak, "matmul_library": library,
                       **{f"matmul_gflops_{lib}": v for lib, v in peaks.items()}, "prefill_gflop": flops / 1e9,
                       "line": conditions_line(cond)})


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.prefill_split --params params.yaml --csv outputs/prefill_split.csv
        --conditions outputs/prefill_split_conditions.json
    """
    args = arguments(__doc__, "params", "csv", "conditions", argv=argv)
    run(read_section(args.params, "prefill_split", PrefillSplitParams), csv_path=args.csv, conditions_path=args.conditions)


if __name__ == "__main__":
    main()
