"""Stages tables, plots and report: outputs/tables/, outputs/plots/, outputs/REPORT.md.

    python pipelines/report.py tables|plots|report
"""
from __future__ import annotations

import json
import sys

import pandas as pd

from chunklab.report import chapter, figures, tables
from common import OUTPUTS


def load():
    split = pd.read_csv(OUTPUTS / "prefill_split.csv")
    tb = OUTPUTS / "token_budget"
    runs, requests = pd.read_csv(tb / "runs.csv"), pd.read_csv(tb / "requests.csv")
    tokens = pd.read_csv(tb / "tokens.csv")
    split_cond = json.loads((OUTPUTS / "prefill_split_conditions.json").read_text())
    tb_cond = json.loads((tb / "conditions.json").read_text())
    return split, runs, requests, tokens, split_cond, tb_cond


def gemm_peaks(cond: dict) -> str:
    """'MKL 203, oneDNN 474 and panels 480' GFLOP/s: each library's peak the stage measured."""
    names = {"mkl": "MKL", "onednn": "oneDNN", "panels": "the fused forward's panels"}
    parts = [f"{name} {cond[f'matmul_gflops_{lib}']:.0f}" for lib, name in names.items() if f"matmul_gflops_{lib}" in cond]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}" if len(parts) > 1 else "".join(parts)


def make_tables() -> None:
    split, runs, _, _, split_cond, tb_cond = load()
    out = OUTPUTS / "tables"
    tables.write(tables.prefill_split_table(split), out / "prefill_split", "Prefill split: one 1536-token prompt",
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
    tables.write(tables.token_budget_table(small, ["budget"], "Seeds"), out / "token_budget_small",
                 f"MEASURED. Token budget, ch10 trace, {int(small['num_requests'].iloc[0])} requests "
                 "(median [min–max] over seeds)", [f"Conditions (first run): {tb_cond['small']}"])
    tables.write(tables.token_budget_table(repeats, ["intensity", "budget"], "Repeats"), out / "token_budget_large",
                 f"MEASURED. Token budget, ch10 mix, {int(large['num_requests'].iloc[0])} requests, seed "
                 f"{int(repeats['seed'].iloc[0])} (median [min–max] over repeats of the same seed: the machine's noise)",
                 [f"Loads are fractions of the simulated capacity (outputs/simulated/tables/capacity.md). {noise}",
                  f"Conditions (first run): {tb_cond['large']}"])
    tables.write(tables.token_budget_table(seeds, ["budget"], "Seeds"), out / "token_budget_seeds",
                 f"MEASURED. Token budget, ch10 mix at {small['intensity'].iloc[0]}, "
                 f"{int(large['num_requests'].iloc[0])} requests (median [min–max] over seeds: the workload's noise; "
                 "the repeated seed counts once, as the median of its repeats)",
                 [f"Conditions (first run): {tb_cond['large']}"])
    tables.write(tables.chapter_budget_table(), out / "token_budget_chapter", "Token budget: the chapter's published run",
                 [f"Chapter's conditions: {chapter.CONDITIONS}"])


def make_plots() -> None:
    split, runs, requests, tokens, _, _ = load()
    out = OUTPUTS / "plots"
    large = requests[(requests["size"] == "large") & (requests["intensity"] == requests["intensity"].iloc[0])]
    figures.ttft_ecdf(large, out / "ttft_ecdf.png")
    figures.itl_distribution(large, out / "itl_distribution.png")
    figures.timeline(tokens, out / "timeline.png")
    figures.prefill_split(split, out / "prefill_split.png")
    figures.metrics_vs_budget(runs[runs["intensity"] == runs["intensity"].iloc[0]], out / "metrics_vs_budget.png")
    figures.ttft_by_class(large, out / "ttft_by_class.png")


def make_report() -> None:
    from chunklab.report.writeup import report

    (OUTPUTS / "REPORT.md").write_text(report(*load(), OUTPUTS))


if __name__ == "__main__":
    {"tables": make_tables, "plots": make_plots, "report": make_report}[sys.argv[1]]()
