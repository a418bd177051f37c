"""Stages tables, plots and report: outputs/tables/, outputs/plots/, outputs/REPORT.md (chunklab/stages/report.py).

    pipelines/report.py tables|plots|report --split outputs/prefill_split.csv
        --split-conditions outputs/prefill_split_conditions.json --token-budget outputs/token_budget
        --fidelity outputs/fidelity --machine outputs/machine.json
        --out outputs/tables|outputs/plots|outputs/REPORT.md
        [plots: --params params.yaml --profile outputs/profiles/machine.json --outputs outputs (the simulated
         stages' and cost_models' CSVs, drawn under --out)]
        [report: --outputs outputs (every table it quotes) --metrics outputs/chapter_metrics.json]
"""
import argparse
import json
from pathlib import Path

from chunklab.stages import report
from chunklab.stages.common import read_params
from chunklab.stages.sim_figures import make_simulated_plots

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["tables", "plots", "report"])
    for name in ("--split", "--split-conditions", "--token-budget", "--fidelity", "--machine", "--out"):
        ap.add_argument(name, type=Path, required=True, metavar="PATH")
    ap.add_argument("--outputs", type=Path, metavar="PATH")
    ap.add_argument("--metrics", type=Path, metavar="PATH")
    ap.add_argument("--params", type=Path, metavar="PATH")
    ap.add_argument("--profile", type=Path, metavar="PATH")
    args = ap.parse_args()
    if args.what == "report" and (args.outputs is None or args.metrics is None):
        ap.error("report reads every table it quotes under --outputs and writes its headline numbers to --metrics")
    if args.what == "plots" and (args.outputs is None or args.params is None or args.profile is None):
        ap.error("plots draws the simulated stages' CSVs under --outputs, captioned from --params and --profile")
    measured = report.load(args.split, args.split_conditions, args.token_budget, args.fidelity)
    if args.what == "report":
        report.make_report(measured, args.outputs, args.out, args.metrics)
    elif args.what == "plots":
        report.make_plots(measured, args.out, json.loads(args.machine.read_text())["cpu_model"])
        make_simulated_plots(read_params(args.params), args.profile, args.outputs, args.out)
    else:
        report.make_tables(measured, args.out)
