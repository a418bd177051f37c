"""Stages tables, plots and report: the measured chapter tables, their figures, and REPORT.md,
from the prefill_split and token_budget stages' outputs."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from chunklab.report import chapter, figures, tables
from chunklab.report.writeup import chapter_metrics
from chunklab.report.writeup import report as writeup


@dataclass(frozen=True)
class Measured:
    """What the prefill_split and token_budget stages wrote."""
    split: pd.DataFrame
    runs: pd.DataFrame
    requests: pd.DataFrame
    tokens: pd.DataFrame
    split_conditions: dict
    token_budget_conditions: dict


def load(split_csv: Path, split_conditions: Path, token_budget_dir: Path) -> Measured:
    tb = token_budget_dir
    return Measured(pd.read_csv(split_csv), pd.read_csv(tb / "runs.csv"), pd.read_csv(tb / "requests.csv"),
                    pd.read_csv(tb / "tokens.csv"), json.loads(split_conditions.read_text()),
                    json.loads((tb / "conditions.json").read_text()))


def gemm_peaks(cond: dict) -> str:
    """'MKL 203, oneDNN 474 and panels 480' GFLOP/s: each library's peak the stage measured."""
    names = {"mkl": "MKL", "onednn": "oneDNN", "panels": "the fused forward's panels"}
    parts = [f"{name} {cond[f'matmul_gflops_{lib}']:.0f}" for lib, name in names.items() if f"matmul_gflops_{lib}" in cond]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else "".join(parts)


def make_tables(m: Measured, out_dir: Path) -> None:
    """out_dir/<table>.md and .csv of prefill_split, token_budget_{small,large,seeds,chapter}."""
    runs, split_cond, tb_cond = m.runs, m.split_conditions, m.token_budget_conditions
    tables.write(tables.prefill_split_table(m.split), out_dir / "prefill_split", "Prefill split: one 1536-token prompt",
                 [f"Median of timed runs; fp32 GEMM peak on this machine: {split_cond['matmul_gflops']:.0f} GFLOP/s "
                  f"(the best of {gemm_peaks(split_cond)}; fractions are of the best).",
                  f"Conditions: {split_cond['line']}", f"Chapter's conditions: {chapter.CONDITIONS}"])
    small, large = runs[runs["size"] == "small"], runs[runs["size"] == "large"]
    repeats = large[large["seed"] == large["seed"].min()]
    seeds = large[large["intensity"] == small["intensity"].iloc[0]].groupby(["budget", "seed"]).median(
        numeric_only=True).reset_index()
    noise = (f"Noise guard (steps slower than 2x the profile's prediction) over these {len(large)} runs: "
             f"{100 * large['noisy_steps_share'].median():.2f}% of steps median, "
             f"{100 * large['noisy_steps_share'].max():.2f}% max; worst step {large['worst_step_excess'].max():.1f}x "
             "its prediction.")
    tables.write(tables.token_budget_table(small, ["budget"], "Seeds"), out_dir / "token_budget_small",
                 f"MEASURED. Token budget, ch10 trace, {int(small['num_requests'].iloc[0])} requests "
                 "(median [min–max] over seeds)", [f"Conditions (first run): {tb_cond['small']}"])
    tables.write(tables.token_budget_table(repeats, ["intensity", "budget"], "Repeats"), out_dir / "token_budget_large",
                 f"MEASURED. Token budget, ch10 mix, {int(large['num_requests'].iloc[0])} requests, seed "
                 f"{int(repeats['seed'].iloc[0])} (median [min–max] over repeats of the same seed: the machine's noise)",
                 [f"Loads are fractions of the simulated capacity (outputs/simulated/tables/capacity.md). {noise}",
                  f"Conditions (first run): {tb_cond['large']}"])
    tables.write(tables.token_budget_table(seeds, ["budget"], "Seeds"), out_dir / "token_budget_seeds",
                 f"MEASURED. Token budget, ch10 mix at {small['intensity'].iloc[0]}, "
                 f"{int(large['num_requests'].iloc[0])} requests (median [min–max] over seeds: the workload's noise; "
                 "the repeated seed counts once, as the median of its repeats)",
                 [f"Conditions (first run): {tb_cond['large']}"])
    tables.write(tables.chapter_budget_table(), out_dir / "token_budget_chapter",
                 "Token budget: the chapter's published run", [f"Chapter's conditions: {chapter.CONDITIONS}"])


def make_plots(m: Measured, out_dir: Path) -> None:
    """out_dir/{ttft_ecdf,itl_distribution,timeline,prefill_split,metrics_vs_budget,ttft_by_class}.png."""
    requests, runs = m.requests, m.runs
    large = requests[(requests["size"] == "large") & (requests["intensity"] == requests["intensity"].iloc[0])]
    figures.ttft_ecdf(large, out_dir / "ttft_ecdf.png")
    figures.itl_distribution(large, out_dir / "itl_distribution.png")
    figures.timeline(m.tokens, out_dir / "timeline.png")
    figures.prefill_split(m.split, out_dir / "prefill_split.png")
    figures.metrics_vs_budget(runs[runs["intensity"] == runs["intensity"].iloc[0]], out_dir / "metrics_vs_budget.png")
    figures.ttft_by_class(large, out_dir / "ttft_by_class.png")


def make_report(m: Measured, outputs_dir: Path, out_path: Path, metrics_path: Path) -> None:
    """REPORT.md at out_path, from every table and figure under outputs_dir; its headline numbers (the
    claims' verdicts, the prefill split, measured capacity) as DVC metrics at metrics_path."""
    out_path.write_text(writeup(m.split, m.runs, m.requests, m.tokens, m.split_conditions,
                                m.token_budget_conditions, outputs_dir))
    metrics_path.write_text(json.dumps(chapter_metrics(m.runs, m.split, outputs_dir), indent=2) + "\n")
