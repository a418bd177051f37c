"""Stages tables, plots and report: outputs/tables/, outputs/plots/, outputs/REPORT.md (chunklab/stages/report.py).

    pipelines/report.py tables|plots|report --split outputs/prefill_split.csv
        --split-conditions outputs/prefill_split_conditions.json --token-budget outputs/token_budget
        --fidelity outputs/fidelity --machine outputs/machine.json
        --out outputs/tables|outputs/plots|outputs/REPORT.md
        [report: --outputs outputs (every table it quotes) --metrics outputs/chapter_metrics.json]
"""
import argparse
import json
from pathlib import Path

from chunklab.stages import report

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["tables", "plots", "report"])
    for name in ("--split", "--split-conditions", "--token-budget", "--fidelity", "--machine", "--out"):
        ap.add_argument(name, type=Path, required=True, metavar="PATH")
    ap.add_argument("--outputs", type=Path, metavar="PATH")
    ap.add_argument("--metrics", type=Path, metavar="PATH")
    args = ap.parse_args()
    if args.what == "report" and (args.outputs is None or args.metrics is None):
        ap.error("report reads every table it quotes under --outputs and writes its headline numbers to --metrics")
    measured = report.load(args.split, args.split_conditions, args.token_budget, args.fidelity)
    if args.what == "report":
        report.make_report(measured, args.outputs, args.out, args.metrics)
    elif args.what == "plots":
        report.make_plots(measured, args.out, json.loads(args.machine.read_text())["cpu_model"])
    else:
        report.make_tables(measured, args.out)
