"""Stage topologies (measured, then simulated): this machine's two cores as three arms (ARMS), on the
same ch10 requests at loads of the measured capacity (outputs/capacity/, the single engine's at budget
512 under the SLO of capacity_cell, which scores the runs too), each repeated (same seed: the machine's noise); then each arm's simulated twin with this
machine's profile and the shm link that this stage times first (experiments/shm_link.py; the twins
take conf/link/shm.yaml's preset with this repro's fit, written beside the outputs as shm.yaml: the
committed preset is a copy of one, conf/ being every stage's dependency). Per request, paired TTFT and E2E errors of simulated vs measured beside the
measured repeat-vs-repeat floor (experiments/fidelity.py), and each arm's range over the repeats at each load. The
profile prices the single engine's steps (both cores); each cluster instance runs on one core and one
thread, so the twins of the cluster arms scale the profile's step times by the speed sentinel's
one-thread / two-thread ratio, read by this stage (one_thread_scale).

The cluster arms' coordinator (the stage's process, unpinned) shares the instances' two cores: its CPU
while serving is in each run's summary (coordinator_cpu_s, coordinator_cpu_share: of the serving's wall
time), its range in arms.csv, and one line of the conditions says how large it was.

Writes out_dir: shm_link.csv, shm.yaml, runs.csv (every measured and simulated run's summary), paired.csv,
arms.csv, requests_measured.csv, conditions.json, metrics.json; and the table at table_path.
"""
from __future__ import annotations

import multiprocessing
import os
from functools import partial
from pathlib import Path

import pandas as pd

from chunklab.calibration.sentinel import SpeedSentinel
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.fidelity import paired_errors, paired_table, repeat_floor
from chunklab.experiments.shm_link import fit_link, link_preset, time_transfers
from chunklab.experiments.simulate import requests_of, simulate, simulate_many
from chunklab.experiments.sweep import run_grid
from chunklab.metrics.conditions import cpu_model, sim_conditions_line
from chunklab.model.sizes import kv_bytes_per_token
from chunklab.stages.common import arguments, measured_capacity, read_section, runs_dir, write_json, write_text
from chunklab.stages.typed_yaml import Section, no_overrides


@Section
class TopologiesParams:
    workload: str
    num_requests: int
    seed: int
    repeats: int
    loads: list[float]  # of this machine's measured capacity at capacity_cell (the capacity stage's)
    capacity_cell: tuple[int, str]  # [budget, slo]: the loads' base, and the runs' SLO (conf/slo/)
    link_repeats: int  # timed transfers per size of the shm link
    processes: int  # simulated runs in parallel
    overrides: list[str] = no_overrides()


# The same two cores, three ways: one engine on both (torch's threads), two replicas (one core and
# one thread each), one prefill + one decode instance (likewise; KV through shared memory).
ARMS = {"single": {},
        "replicas": {"topology": "replicas", "topology.replicas": 2, "router": "least_outstanding_requests"},
        "pd": {"topology": "disaggregated", "topology.prefill": 1, "topology.decode": 1, "link": "shm"}}
ARM_METRICS = ["slo_attainment", "ttft_p50_s", "tpot_p50_s"]  # per arm and load: median, min, max over repeats
COORDINATOR_METRICS = ["coordinator_cpu_s", "coordinator_cpu_share"]  # measured cluster arms only (NaN elsewhere)


def link_conditions(model) -> str:
    return (f"{cpu_model()}, {len(os.sched_getaffinity(0))} cores; the receiver, which copies the blocks out of "
            f"the sender's shared pool, pinned to one core with 1 torch thread; the sender (this stage's process) "
            f"unpinned; {model.name} KV, {kv_bytes_per_token(model)} bytes a token, 16-token blocks")


def _one_thread_ratio(base: list[str]) -> float:
    """The sentinel's ratio on one core and one thread, as an instance runs (in a process of its own:
    pinning this one would pin the threads torch starts next, and slow every run after)."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cfg = compose_run_config([*base, "engine.threads=1"])
    return SpeedSentinel.for_run(cfg.model, cfg.engine).read().ratio


def one_thread_scale(base: list[str]) -> tuple[float, float, float]:
    """How much slower a step runs on one core and one thread than the profile's way (torch's default
    threads, both cores): the speed sentinel (calibration/sentinel.py) read both ways, one right after
    the other. Returns (scale, one, two): the twins of the cluster arms take scale = one / two as
    hardware.step_time_scale, since the profile prices the single engine's steps and each instance of
    a cluster runs on one thread."""
    cfg = compose_run_config(base)
    two = SpeedSentinel.for_run(cfg.model, cfg.engine).read().ratio
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        one = pool.apply(_one_thread_ratio, (base,))
    return one / two, one, two


def arm_ranges(runs: pd.DataFrame) -> pd.DataFrame:
    """Per executor, load and arm: each of ARM_METRICS' (and COORDINATOR_METRICS', where runs has them)
    median, min and max over the repeats. Which arm wins is the report's to decide against these ranges
    (report/topologies.py), not a median's."""
    g = runs.groupby(["executor", "load", "arm"], sort=False)[ARM_METRICS + [c for c in COORDINATOR_METRICS
                                                                          if c in runs]]
    return pd.concat([g.median(), g.min().add_suffix("_min"), g.max().add_suffix("_max")], axis=1).reset_index()


def coordinator_line(runs: pd.DataFrame) -> str:
    """The conditions' line on the coordinator: per measured cluster arm, its CPU share of the serving's
    wall time, median [min-max] over every load and repeat, and its most CPU seconds in one run."""
    if "coordinator_cpu_share" not in runs:
        return "not measured"
    m = runs[(runs["executor"] == "measured") & runs["coordinator_cpu_share"].notna()]
    if m.empty:
        return "not measured"
    parts = [f"{arm} {100 * g['coordinator_cpu_share'].median():.1f}% [{100 * g['coordinator_cpu_share'].min():.1f}-"
             f"{100 * g['coordinator_cpu_share'].max():.1f}%] of the serving wall time, at most "
             f"{g['coordinator_cpu_s'].max():.2f} s CPU a run" for arm, g in m.groupby("arm", sort=False)]
    return ("this process, unpinned, on the instances' cores: " + "; ".join(parts)
            + " (median [min-max] over the loads and repeats)")


def run(p: TopologiesParams, profile: Path, capacity_csv: Path, out_dir: Path, table_path: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    model = compose_run_config(["tracking=none", *p.overrides]).model
    link_rows = time_transfers(model, repeats=p.link_repeats)
    fit = fit_link(link_rows)
    pd.DataFrame(link_rows).to_csv(out_dir / "shm_link.csv", index=False, float_format="%.6g")
    write_text(out_dir / "shm.yaml", link_preset(fit, link_conditions(model)))

    capacity = measured_capacity(capacity_csv, int(p.capacity_cell[0]), str(p.capacity_cell[1]))
    workload = {"workload": p.workload, "workload.num_requests": p.num_requests, "workload.seed": p.seed}
    pts = [(f"{arm} load {load:g}", arm, load, workload | {"workload.rate_per_s": round(load * capacity, 4)} | ARMS[arm])
           for load in p.loads for arm in ARMS]
    order = [(r, *pt) for r in range(p.repeats) for pt in pts]  # repeats outermost: drift hits every arm
    base = ["tracking.progress=false", "tracking.experiment_name=dvc_topologies", "slowdown=false",
            f"engine.profile={profile}", f"slo={p.capacity_cell[1]}", *p.overrides]
    scale, one, two = one_thread_scale(base)
    res = run_grid("topologies", base, [pt for *_, pt in order], runs_dir())
    labels = [label for _, label, *_ in order]
    res.runs = res.runs.assign(point=labels, repeat=[r for r, *_ in order], arm=[a for _, _, a, _, _ in order],
                               load=[ld for *_, ld, _ in order], executor="measured")
    res.requests.insert(0, "repeat", res.requests["run"].map(lambda i: order[i][0]))
    res.requests.insert(0, "point", res.requests["run"].map(lambda i: labels[i]))

    sim_base = ["tracking=none", "slowdown=false", f"engine.profile={profile}", f"slo={p.capacity_cell[1]}", *p.overrides,
                f"link.bandwidth_gb_per_s={fit.bandwidth_gb_per_s:.6g}", f"link.latency_s={fit.latency_s:.6g}"]
    cfgs = [compose_run_config(sim_base + [f"{k}={v}" for k, v in pt.items()]
                               + ([f"hardware.step_time_scale={scale:.4g}"] if arm != "single" else []))
            for _, arm, _, pt in pts]
    sims = simulate_many(cfgs, p.processes, fn=partial(simulate, view=requests_of))
    sim_req = pd.concat([pd.DataFrame(reqs).assign(point=label) for (label, *_), (_, reqs) in zip(pts, sims)])
    sim_runs = pd.DataFrame([{"point": label, "arm": arm, "load": load, "repeat": 0} | summary
                             for (label, arm, load, _), (summary, _) in zip(pts, sims)]).assign(executor="simulated")
    runs = pd.concat([res.runs, sim_runs], ignore_index=True)

    paired = paired_table(paired_errors(res.requests, sim_req))
    floor = repeat_floor(res.requests)
    table = paired.merge(floor[["point", "metric", "median_rel_error", "p90_rel_error"]], on=["point", "metric"],
                         how="left", suffixes=("", "_floor"))
    table = table[table.metric.isin(["ttft", "e2e"])]
    arms = arm_ranges(runs)
    runs.to_csv(out_dir / "runs.csv", index=False, float_format="%.6g")
    table.to_csv(out_dir / "paired.csv", index=False, float_format="%.4g")
    arms.to_csv(out_dir / "arms.csv", index=False, float_format="%.4g")
    res.requests.to_csv(out_dir / "requests_measured.csv", index=False, float_format="%.6g")
    lines = {"measured": res.conditions[0], "simulated": sim_conditions_line(cfgs[-1].model, cfgs[-1].engine, cfgs[-1].hardware),
             "shm link": link_conditions(model),
             "capacity_req_per_s": f"{capacity:.4g} (budget {p.capacity_cell[0]}, slo={p.capacity_cell[1]}, measured)",
             "instances' step time scale": f"{scale:.3f} (sentinel on one pinned core and thread {one:.3f}, "
                                           f"on both cores {two:.3f}; the twins of replicas and pd)",
             "coordinator CPU": coordinator_line(runs)}
    write_json(out_dir / "conditions.json", lines)
    # dvc metrics show: cluster.shm.*, cluster.<arm>.load_<x>.<metric>.{paired_error,floor,measured_median}
    cluster: dict = {"shm": {"bandwidth_gb_per_s": fit.bandwidth_gb_per_s, "latency_s": fit.latency_s, "r2": fit.r2},
                     "one_thread_step_time_scale": scale}
    for row in table.itertuples():
        arm, load = row.point.split(" load ")
        cell = cluster.setdefault(arm, {}).setdefault(f"load_{load.replace('.', '_')}", {}).setdefault(row.metric, {})
        cell |= {"paired_error": row.median_rel_error, "floor": row.median_rel_error_floor}
    for row in arms[arms.executor == "measured"].itertuples():
        at = cluster.setdefault(row.arm, {}).setdefault(f"load_{f'{row.load:g}'.replace('.', '_')}", {})
        for metric in ARM_METRICS:
            at.setdefault(metric, {})["measured_median"] = getattr(row, metric)
    write_json(out_dir / "metrics.json", {"topologies": cluster})
    md = markdown(table, arms, fit, lines)
    write_text(table_path, md)
    print(md)


def markdown(table: pd.DataFrame, arms: pd.DataFrame, fit, lines: dict[str, str]) -> str:
    out = ["# The measured cluster: three arms on two cores, and their simulated twins", "",
           "Per load, each arm's median [min-max] over the measured repeats, then the simulated twin "
           "(REPORT.md decides which arm wins against these ranges):", ""]
    for (executor, load), g in arms.groupby(["executor", "load"], sort=False):
        out.append(f"- {executor}, load {load:g}: share in SLO " + ", ".join(
            f"{r.arm} {r.slo_attainment:.0%} [{r.slo_attainment_min:.0%}-{r.slo_attainment_max:.0%}]"
            for r in g.itertuples()) + "; TTFT p50 " + ", ".join(
            f"{r.arm} {1e3 * r.ttft_p50_s:.1f} [{1e3 * r.ttft_p50_s_min:.1f}-{1e3 * r.ttft_p50_s_max:.1f}]"
            for r in g.itertuples()) + " ms; TPOT p50 " + ", ".join(
            f"{r.arm} {1e3 * r.tpot_p50_s:.2f} [{1e3 * r.tpot_p50_s_min:.2f}-{1e3 * r.tpot_p50_s_max:.2f}]"
            for r in g.itertuples()) + " ms")
    out += ["", "| point | metric | sim vs measured (median) | p90 | floor: repeat vs repeat (median) | n |",
            "|---|---|---|---|---|---|"]
    for r in table.itertuples():
        out.append(f"| {r.point} | {r.metric} | {r.median_rel_error:.1%} | {r.p90_rel_error:.1%} | "
                   f"{r.median_rel_error_floor:.1%} | {r.n} |")
    out += ["", f"shm link (measured, fit): {fit.bandwidth_gb_per_s:.3g} GB/s + {fit.latency_s * 1e6:.0f} us "
            f"(r2 {fit.r2:.3f}, {fit.num_transfers} transfers)", ""]
    out += [f"- {k}: {v}" for k, v in lines.items()]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.topologies --params params.yaml --profile outputs/profiles/machine.json
        --capacity outputs/capacity/measured_vs_simulated.csv --out outputs/topologies --table outputs/tables/topologies.md
    """
    args = arguments(__doc__, "params", "profile", "capacity", "out", "table", argv=argv)
    run(read_section(args.params, "topologies", TopologiesParams), profile=args.profile, capacity_csv=args.capacity,
        out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
