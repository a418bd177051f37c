"""Stages tables, plots and report: the measured chapter tables, their figures, and REPORT.md,
from the prefill_split, token_budget and fidelity stages' outputs.

    python -m chunklab.stages.report tables|plots|report --split outputs/prefill_split.csv
        --split-conditions outputs/prefill_split_conditions.json --token-budget outputs/token_budget
        --fidelity outputs/fidelity --machine outputs/machine.json
        --out outputs/tables|outputs/plots|outputs/REPORT.md
        [plots: --params params.yaml --profile outputs/profiles/machine.json --outputs outputs (the simulated
         stages' and cost_models' CSVs, drawn under --out)]
        [report: --outputs outputs (every table it quotes) --metrics outputs/chapter_metrics.json]
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from chunklab.report import chapter, figures, tables
from chunklab.report.claim_text import chapter_metrics, grid_only
from chunklab.report.writeup import report as writeup
from chunklab.stages.sim_figures import make_simulated_plots, read_plot_params


@dataclass(frozen=True)
class Measured:
    """What the prefill_split, token_budget and fidelity stages wrote."""
    split: pd.DataFrame
    runs: pd.DataFrame
    requests: pd.DataFrame
    tokens: pd.DataFrame
    split_conditions: dict
    token_budget_conditions: dict
    grid: pd.DataFrame  # the fidelity stage's measured runs of the ch10 mix: each budget at each load
    fidelity: pd.DataFrame  # its percentile table, simulated against measured
    fidelity_conditions: dict


def load(split_csv: Path, split_conditions: Path, token_budget_dir: Path, fidelity_dir: Path) -> Measured:
    tb, fid = token_budget_dir, fidelity_dir
    fid_runs = pd.read_csv(fid / "runs.csv")
    grid = grid_only(fid_runs[(fid_runs["executor"] == "torch") & fid_runs["load"].notna()]).reset_index(drop=True)
    grid = grid.assign(intensity=grid["load"].map(lambda x: f"load {x:g} of measured capacity"))
    return Measured(pd.read_csv(split_csv), pd.read_csv(tb / "runs.csv"), pd.read_csv(tb / "requests.csv"),
                    pd.read_csv(tb / "tokens.csv"), json.loads(split_conditions.read_text()),
                    json.loads((tb / "conditions.json").read_text()), grid, pd.read_csv(fid / "fidelity.csv"),
                    json.loads((fid / "conditions.json").read_text()))


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
                 [f"{rate_share(large, m.grid)} {noise}", f"Conditions (first run): {tb_cond['large']}"])
    grid = m.grid[m.grid["repeat"] == 0]  # each seed once: the runs the claims pair
    capacity = float(grid["measured_capacity_req_per_s"].iloc[0])
    seeds = ", ".join(str(int(s)) for s in sorted(grid["seed"].unique()))
    tables.write(tables.token_budget_table(grid, ["intensity", "budget"], "Seeds"), out_dir / "token_budget_loads",
                 f"MEASURED. Token budget at loads of this machine's reference capacity ({capacity:.2f} req/s), ch10 "
                 f"mix, {int(grid['num_requests'].iloc[0])} requests a run, seeds {seeds} (median [min–max] over the "
                 "seeds: the same arrivals at every budget; the fidelity stage's runs, first repeat)",
                 ["Latencies on the replay clock: each step's measured duration, arrivals at their trace times "
                  "(engine.clock=replay).", f"Conditions (first run): {m.fidelity_conditions['measured']}"])
    tables.write(tables.chapter_budget_table(), out_dir / "token_budget_chapter",
                 "Token budget: the chapter's published run", [f"Chapter's conditions: {chapter.CONDITIONS}"])


def rate_share(runs: pd.DataFrame, grid: pd.DataFrame) -> str:
    """'8 req/s is 0.61 of this machine's measured capacity (13.12 req/s at budget 512).'"""
    capacity = float(grid["measured_capacity_req_per_s"].iloc[0])
    rate = float(runs["rate_per_s"].iloc[0])
    return f"{rate:g} req/s is {rate / capacity:.2f} of this machine's measured capacity ({capacity:.2f} req/s at budget 512)."


def make_plots(m: Measured, out_dir: Path, machine: str) -> None:
    """out_dir/{ttft_ecdf,itl_distribution,timeline,prefill_split,metrics_vs_budget,ttft_by_class,
    budget_by_load,fidelity}.png; machine: the CPU that measured them, in every caption."""
    requests, runs = m.requests, m.runs
    rate = runs["intensity"].iloc[0]
    large = requests[(requests["size"] == "large") & (requests["intensity"] == rate)]
    n_large, n_small = int(runs.loc[runs["size"] == "large", "num_requests"].iloc[0]), int(
        runs.loc[runs["size"] == "small", "num_requests"].iloc[0])
    at = lambda what: f"MEASURED on {machine}; {what}"  # noqa: E731
    figures.ttft_ecdf(large, out_dir / "ttft_ecdf.png", at(f"ch10 mix, {n_large} requests at {rate}, every repeat and seed"))
    figures.itl_distribution(large, out_dir / "itl_distribution.png",
                             at(f"ch10 mix, {n_large} requests at {rate}, every repeat and seed"))
    figures.timeline(m.tokens, out_dir / "timeline.png", at(f"the chapter's {n_small}-request trace at {rate}"))
    figures.prefill_split(m.split, out_dir / "prefill_split.png",
                          at("one request alone (no load); X: the chapter's published times, its engine and machine"),
                          chapter.PREFILL_SPLIT_MS)
    figures.metrics_vs_budget(runs[runs["intensity"] == rate], out_dir / "metrics_vs_budget.png", hue="size",
                              caption=at(f"ch10 mix at {rate}: {n_small} requests (size small) and {n_large} (large)"))
    figures.ttft_by_class(large, out_dir / "ttft_by_class.png", at(f"ch10 mix, {n_large} requests at {rate}"))
    grid = m.grid.assign(load=m.grid["load"].map("{:g}".format))
    capacity = float(m.grid["measured_capacity_req_per_s"].iloc[0])
    figures.metrics_vs_budget(grid, out_dir / "budget_by_load.png", hue="load",
                              caption=at(f"ch10 mix, {int(m.grid['num_requests'].iloc[0])} requests per run, at loads "
                                         f"of the measured capacity ({capacity:.2f} req/s)"))
    table = m.fidelity[~m.fidelity["point"].str.startswith("azure")]
    figures.fidelity(table, out_dir / "fidelity.png",
                     f"MEASURED on {machine} against SIMULATED with its profile; ch10 mix at loads "
                     f"{', '.join(f'{x:g}' for x in sorted(m.grid['load'].unique()))} of the measured capacity")


def make_report(m: Measured, outputs_dir: Path, out_path: Path, metrics_path: Path) -> None:
    """REPORT.md at out_path, from every table and figure under outputs_dir; its headline numbers (the
    claims' verdicts, the prefill split, measured capacity) as DVC metrics at metrics_path."""
    out_path.write_text(writeup(m.split, m.runs, m.requests, m.tokens, m.split_conditions,
                                m.token_budget_conditions, outputs_dir))
    metrics_path.write_text(json.dumps(chapter_metrics(m.runs, m.split, outputs_dir), indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["tables", "plots", "report"])
    for name in ("--split", "--split-conditions", "--token-budget", "--fidelity", "--machine", "--out"):
        ap.add_argument(name, type=Path, required=True, metavar="PATH")
    for name in ("--outputs", "--metrics", "--params", "--profile"):
        ap.add_argument(name, type=Path, metavar="PATH")
    args = ap.parse_args(argv)
    if args.what == "report" and (args.outputs is None or args.metrics is None):
        ap.error("report reads every table it quotes under --outputs and writes its headline numbers to --metrics")
    if args.what == "plots" and (args.outputs is None or args.params is None or args.profile is None):
        ap.error("plots draws the simulated stages' CSVs under --outputs, captioned from --params and --profile")
    plot_params = read_plot_params(args.params) if args.what == "plots" else None  # bad params: stop before any work
    measured = load(args.split, args.split_conditions, args.token_budget, args.fidelity)
    if args.what == "report":
        make_report(measured, args.outputs, args.out, args.metrics)
    elif args.what == "plots":
        make_plots(measured, args.out, json.loads(args.machine.read_text())["cpu_model"])
        make_simulated_plots(plot_params, args.profile, args.outputs, args.out)
    else:
        make_tables(measured, args.out)


if __name__ == "__main__":
    main()
