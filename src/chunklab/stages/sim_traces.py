"""Stage sim_traces (simulated): every row of the Azure conversation trace (data/traces/)
at its own timestamps, per budget, and one time-compressed replay past capacity: per-class
(long/short prompt) TTFT and slowdown, and the queue length over time."""
from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pandas as pd

from chunklab.experiments.compose import compose_run_config, simulated_conditions
from chunklab.metrics.conditions import describe_workload
from chunklab.runner import execute
from chunklab.stages.common import arguments, read_section, write_text
from chunklab.stages.shared_params import SimParams
from chunklab.stages.typed_yaml import Section


@Section
class SimTracesParams:
    budgets: list[int]
    compressed_budget: int
    compressed_time_scale: float
    timeline_bin_s: float
    num_requests: int | None  # None: every row
    overrides: list[str]


CLASS_KEYS = ["slo_attainment", "ttft_p50_s", "ttft_p99_s", "slowdown_p50", "slowdown_p99", "tpot_p50_s"]


def replay(job: tuple[str, int, float, list[str], float]) -> dict:
    """One replay (label, budget, time scale, overrides, queue bin in seconds): per-class rows,
    the queue's max per bin, and the workload's description."""
    label, budget, time_scale, overrides, bin_s = job
    cfg = compose_run_config(["engine=simulated", "tracking=none", "workload=azure_conv",
                              f"workload.trace.time_scale={time_scale}", f"scheduler.budget={budget}", *overrides])
    run = execute(cfg, warmup=False, slowdown=True)
    s, result, stats = run.summary, run.result, run.trace_stats
    rows = [{"replay": label, "budget": budget, "class": "all", "requests": s["num_requests"]}
            | {k: s.get(k) for k in CLASS_KEYS}]
    for cls in ("long", "short"):
        p = f"class_{cls}_"
        rows.append({"replay": label, "budget": budget, "class": cls, "requests": s.get(p + "num_requests", 0)}
                    | {k: s.get(p + k) for k in CLASS_KEYS})
    start = np.frombuffer(result.steps.columns["start_s"], dtype=float)
    waiting = np.frombuffer(result.steps.columns["num_waiting"], dtype=np.int64)
    bins = (start // bin_s).astype(np.int64)
    queue = pd.DataFrame({"bin": bins, "waiting": waiting}).groupby("bin")["waiting"].max().reset_index()
    queue = queue.assign(time_s=queue["bin"] * bin_s, replay=label, budget=budget)
    return {"rows": rows, "queue": queue[["replay", "budget", "time_s", "waiting"]],
            "workload": describe_workload(cfg.workload, cfg.model), "rows_clipped": stats.num_clipped, "reordered": stats.num_reordered}


def run(p: SimTracesParams, sim: SimParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (classes.csv, queue.csv; the plots stage draws the queue) and the table at table_path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    overrides = [f"engine.profile={profile}", f"workload.num_requests={'null' if p.num_requests is None else p.num_requests}",
                 *p.overrides]
    jobs = [("real time", b, 1.0, overrides, p.timeline_bin_s) for b in p.budgets]
    jobs.append((f"time x{p.compressed_time_scale}", p.compressed_budget, p.compressed_time_scale,
                 overrides, p.timeline_bin_s))
    with multiprocessing.get_context("fork").Pool(sim.processes) as pool:
        results = pool.map(replay, jobs, chunksize=1)
    classes = pd.DataFrame([row for r in results for row in r["rows"]])
    queue = pd.concat([r["queue"] for r in results], ignore_index=True)
    classes.to_csv(out_dir / "classes.csv", index=False, float_format="%.6g")
    queue.to_csv(out_dir / "queue.csv", index=False, float_format="%.6g")
    md = ["### The Azure conversation trace, every row (simulated)", "",
          classes.to_markdown(index=False, floatfmt=".3f"), "",
          f"SIMULATED. Workload: {results[0]['workload']} ({results[0]['rows_clipped']} prompts clipped to the "
          f"model's context, {results[0]['reordered']} rows reordered by time). 'real time' replays every row at "
          f"its own timestamp; 'time x{p.compressed_time_scale}' replays them {1 / p.compressed_time_scale:.2f}x "
          "faster. Slowdown = a request's latency / its latency alone on the idle (simulated) engine. Queue length "
          f"over time (max per {p.timeline_bin_s:g} s) is in outputs/simulated/traces/queue.csv and outputs/plots/simulated/queue.png.",
          "", f"Conditions: {simulated_conditions([f'engine.profile={profile}', *p.overrides])}", ""]
    write_text(table_path, "\n".join(md))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_traces --params params.yaml --profile outputs/profiles/machine.json
        --out outputs/simulated/traces --table outputs/simulated/tables/traces.md
    """
    args = arguments(__doc__, "params", "profile", "out", "table", argv=argv)
    run(read_section(args.params, "sim_traces", SimTracesParams), read_section(args.params, "sim", SimParams),
        profile=args.profile, out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
