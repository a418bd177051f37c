"""Stage perf (measured): the engine against this machine's limits (perf_limits.py), the simulator
against the real engine, the chapter's trace end to end, and vLLM's CPU build on the same work."""
from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from chunklab import bench, isa
from chunklab.app import run_experiment
from chunklab.config import ConfigError, EngineConfig
from chunklab.engine.executors.model_runner import torch_threads
from chunklab.experiments.compose import compose_run_config
from chunklab.metrics.conditions import conditions, conditions_line
from chunklab.peers import compare, vllm_peer
from chunklab.stages.common import Progress, arguments, read_section, write_json, write_text
from chunklab.stages.perf_limits import AFTER, BEFORE, LIMIT_PARTS, limits, row
from chunklab.stages.perf_process import run_process
from chunklab.stages.typed_yaml import Section, no_overrides


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
    isa: str  # chunklab/isa.py: native, or a cap (avx2) this stage restarts itself under
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
    overrides: list[str] = no_overrides()


def simulator(p: PerfParams, progress: Progress) -> list[dict]:
    """The simulated engine against the real one on the same run, and on a whole real trace (2 parts)."""
    progress.part(f"the ch10 run real and simulated, {p.sim_requests} requests")
    base = ["tracking=none", "tracking.progress=false", f"workload.num_requests={p.sim_requests}",
            *p.overrides]
    walls = {}
    with tempfile.TemporaryDirectory() as tmp:
        # the real run once (~15 s); the simulated one (~0.2 s) five times, its median: one 0.2 s
        # wall read alone on a shared VM moves by a third
        for executor, runs in (("torch", 1), ("simulated", 5)):
            cfg = compose_run_config(base + [f"engine.executor={executor}"])
            times = []
            for i in range(runs):
                t0 = time.perf_counter()
                run_experiment(cfg, Path(tmp) / f"{executor}-{i}")
                times.append(time.perf_counter() - t0)
            walls[executor] = statistics.median(times)
    n = p.sim_trace_rows
    progress.part("the conversation trace simulated in a fresh process")
    rss, wall = run_process(["engine=simulated", "workload=azure_conv",
                             f"workload.num_requests={'null' if n is None else n}", *p.trace_overrides])
    rows = "every row" if n is None else f"{n} rows"
    return [
        row("simulated_speedup", walls["torch"] / walls["simulated"], "ratio", lambda v: v >= 100, ">= 100",
            f"ch10 mix, {p.sim_requests} requests, budget 512: real {walls['torch']:.1f} s vs simulated "
            f"{walls['simulated']:.3f} s, median of 5 (whole run_experiment: build, serve, records, files, "
            "figure)"),
        row("simulated_trace_wall_s", wall, "s", lambda v: v <= 60, "<= 60",
            f"run.py engine=simulated, Azure conversation trace, {rows} (fresh process, MLflow off)"),
        row("simulated_trace_peak_rss_mb", rss, "MiB", lambda v: v <= 500, "<= 500", "same run"),
    ]


def end_to_end(p: PerfParams, progress: Progress) -> pd.DataFrame:
    progress.part(f"the chapter's trace at budgets {p.budgets}, end to end")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for clock in ("replay",):  # replay against wall, paired and repeated: the clocks stage
            for budget in p.budgets:
                cfg = compose_run_config(["experiment=ch10", "tracking=none", "tracking.progress=false",
                                          f"scheduler.budget={budget}", f"engine.clock={clock}", *p.overrides])
                t0 = time.perf_counter()
                out = run_experiment(cfg, Path(tmp) / f"{clock}-{budget}")
                wall = time.perf_counter() - t0
                s = out.summary
                rows.append({"clock": clock, "budget": budget, "output_tokens_per_s": s["output_tokens_per_s"],
                             "ttft_p50_s": s["ttft_p50_s"], "itl_p50_ms": 1e3 * s["itl_p50_s"],
                             "itl_p99_ms": 1e3 * s["itl_p99_s"], "makespan_s": s["makespan_s"],
                             "experiment_wall_s": wall, "wall_over_makespan": wall / s["makespan_s"]})
    return pd.DataFrame(rows)


def against_vllm(p: PerfParams, cfg) -> tuple[pd.DataFrame, str]:
    """Our engine before and after, and vLLM's CPU build, on the same work (peers/compare.py).
    Without the peer's venv nothing runs (our half alone repeats what token_budget and the ratios
    above measure, at ~2.5 minutes): the table has no rows and one line says why."""
    peer, threads = dataclasses.asdict(p.peer), torch_threads(cfg.engine)  # peers/compare.py reads a dict
    overrides = p.overrides
    try:
        vllm_peer.peer_python()
    except vllm_peer.PeerUnavailable as exc:
        note = f"{exc}; the comparison, our engine's half included, runs only with it."
        print(note)
        return compare.table(None, None), note
    # Our offline rounds bracket vLLM's worker, half before and half after: this VM's speed drifts
    # by 20% within minutes, and measured all on one side, the drift alone could decide a close column.
    first = (peer["repeats"] + 1) // 2
    before_peer = compare.offline_samples(peer, overrides, first)
    vllm = compare.theirs(peer, overrides, threads)
    samples = compare.merged(before_peer, compare.offline_samples(peer, overrides, peer["repeats"] - first))
    note = (f"vLLM {vllm.pop('vllm_version')} (CPU build, .peers/vllm/), fp32, {threads} threads bound to every "
            "core, max_num_seqs 8, prefix caching off, max_num_batched_tokens = the budget, AsyncLLM; "
            "timestamps where its client receives each token. Our prefill split and static batch: "
            f"{first} rounds before vLLM's worker ran and {peer['repeats'] - first} after, pooled (medians).")
    return compare.table(compare.ours(peer, overrides, samples), vllm), note


def run(p: PerfParams, profile: Path, csv_path: Path, vs_vllm_path: Path, end_to_end_path: Path, conditions_path: Path,
        metrics_path: Path, table_path: Path) -> None:
    """Writes the ratios (csv_path), the vLLM comparison, the end-to-end runs, the conditions,
    the metrics and the markdown table, each to its path. profile: this machine's (the calibrate
    stage's), which every run here is predicted or simulated by."""
    named = f"engine.profile={profile}"
    p = dataclasses.replace(p, overrides=[named, *p.overrides], trace_overrides=[named, *p.trace_overrides])
    cfg = compose_run_config(p.overrides)
    progress = Progress("perf", LIMIT_PARTS + p.time_build + 4)
    ratios = pd.DataFrame(limits(p, cfg, progress) + simulator(p, progress))
    e2e = end_to_end(p, progress)
    progress.part("against vLLM's CPU build (when installed)")
    peer, peer_note = against_vllm(p, cfg)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    ratios.to_csv(csv_path, index=False)
    peer.to_csv(vs_vllm_path, index=False, float_format="%.4f")
    after, before = ratios[AFTER], ratios[BEFORE]
    write_json(metrics_path,
               dict(zip(ratios.metric, after)) | {f"{k}_mkl": v for k, v in zip(ratios.metric, before) if pd.notna(v)}
               | {f"{k}_over_vllm": v for k, v in zip(peer.measurement, peer["after / vLLM"]) if pd.notna(v)})
    e2e.to_csv(end_to_end_path, index=False, float_format="%.4f")
    executor = bench.make_engine(cfg.model, EngineConfig(), budget=8).executor
    cond = conditions(cfg, executor.model.num_parameters(), forward_path=f"{executor.forward_path} (before: linear mkl; prefill attention sdpa)")
    cond["workload"] = "micro-benchmarks; end to end: ch10 trace, 24 requests, seed 3"
    cond["isa"] = isa.describe()
    write_json(conditions_path, cond | {"line": conditions_line(cond)})
    serve = p.peer
    vllm_md = [peer_note] if peer.empty else [
        f"One {serve.prompt_tokens}-token prompt prefilled in one pass and in chunks (`LLM.generate`-style, "
        f"max_tokens 1); a static batch of {serve.static_batch} x {serve.static_prompt_tokens}-token prompts + "
        f"{serve.static_new_tokens} new tokens; the ch10 mix, {serve.serve_requests} requests at "
        f"{serve.rate_per_s}/s (seed {serve.seed}), replayed in real time {serve.serve_repeats} times by "
        "each engine at each budget (b64_... = budget 64), each percentile the median over the replays. "
        "TTFT, every-gap ITL and TPOT computed from both engines' token timestamps by the same code. " + peer_note,
        "", peer.to_markdown(index=False, floatfmt=".3f")]
    md = ["### Performance: ratios measured side by side in one run, before (every linear layer through MKL, "
          "prefill chunks through ATen's SDPA) and after (this machine's probed GEMM library per batch size and "
          f"the paged prefill kernel: {executor.forward_path})", "", f"Instruction set: {cond['isa']}.", "",
          ratios.to_markdown(index=False), "",
          "### Against vLLM on the same machine, in the same run", "", *vllm_md, "",
          "### End to end: the chapter's trace, whole experiments", "",
          "Each run's wall time against its makespan on the replay clock (building the engine, serving, writing the "
          "records and the figure). Whether replay latencies are the wall clock's: the clocks stage's table.", "",
          e2e.to_markdown(index=False, floatfmt=".3f"), "", f"Conditions: {conditions_line(cond)}", ""]
    write_text(table_path, "\n".join(md))
    print("\n".join(md))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.perf --params params.yaml --profile outputs/profiles/machine.json --csv outputs/perf.csv
        --vs-vllm outputs/perf_vs_vllm.csv --end-to-end outputs/perf_end_to_end.csv --conditions outputs/perf_conditions.json
        --metrics outputs/perf_metrics.json --table outputs/tables/perf.md
    """
    args = arguments(__doc__, "params", "profile", "csv", "vs_vllm", "end_to_end", "conditions", "metrics", "table", argv=argv)
    p = read_section(args.params, "perf", PerfParams)
    try:
        isa.reexec_under(p.isa, ["-m", "chunklab.stages.perf", *(sys.argv[1:] if argv is None else argv)])
    except ConfigError as err:
        raise SystemExit(f"perf: {err}") from None
    run(p, profile=args.profile, csv_path=args.csv, vs_vllm_path=args.vs_vllm,
        end_to_end_path=args.end_to_end, conditions_path=args.conditions, metrics_path=args.metrics,
        table_path=args.table)


if __name__ == "__main__":
    main()
