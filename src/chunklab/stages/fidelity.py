"""Stage fidelity (measured, then simulated): the real engine at fixed points, each repeated,
against the simulated engine on the same workloads with this machine's profile.

Points (params.yaml `fidelity`): the ch10 mix at loads of this machine's capacity and budgets,
and a slice of the conversation trace at its own timestamps. Each is measured `repeats` times
(same seed: the machine's noise) and simulated once with the profile fit on probe shapes and
serving replays (outputs/profiles/machine.json) and once with its probe-only fit (the "before").
Two comparisons: percentiles against the repeats' median (fidelity.csv), and per request,
paired by id (paired.csv). The measured steps score both fits on steps neither saw.
The tables and the prose around them: stages/fidelity_tables.py.
"""
from __future__ import annotations

import dataclasses
import json
from functools import partial
from pathlib import Path

import pandas as pd

from chunklab.experiments.compose import compose_run_config
from chunklab.calibration.sentinel import SpeedSentinel, geometric_mean
from chunklab.experiments.simulate import requests_of, simulate, simulate_many
from chunklab.experiments.slo import is_scaled, scaled_seconds, step_times, with_multiples
from chunklab.experiments.sweep import run_grid
from chunklab.metrics.conditions import sim_conditions_line
from chunklab.experiments.fidelity import drift_table, paired_errors, paired_table, repeat_floor
from chunklab.stages.common import arguments, measured_capacity, read_section, runs_dir, write_json, write_text
from chunklab.stages.fidelity_tables import (SCALED, SENTINEL, markdown, metrics, percentile_table,
                                             step_errors)
from chunklab.stages.typed_yaml import Section, no_overrides


@Section
class FidelityTrace:
    rows: int
    start_offset: int
    budget: int
    overrides: list[str] = no_overrides()


@Section
class FidelityParams:
    workload: str
    num_requests: int  # as the capacity stage's probes: one run length, so a load means one thing
    seeds: list[int]  # the first is repeated (the machine's noise, the simulation's points); the rest run once
    repeats: int
    budgets: list[int]
    repeated_budgets: list[int]  # whose first-seed grid points are repeated and simulated; the others' run once
    loads: list[float]  # of this machine's measured capacity (the capacity stage's, budget 512)
    trace: FidelityTrace
    shares: list[tuple[float, int, float]]  # [long-prompt share, budget, load]: cells of the sim_share map, measured too
    slos: list[str]  # conf/slo/ names the report scores every run under, after the run (slos.json)
    processes: int
    mix_overrides: list[str] = no_overrides()
    overrides: list[str]


def points(p: FidelityParams, capacity_req_per_s: float) -> list[tuple[str, float | None, dict]]:
    """(label, load, overrides) of every repeated point, named as paired.csv names them: each repeated
    budget at each load of this machine's measured capacity with the first seed (the grid the fidelity
    tables read), the share cells, then the trace slice (load None: its own timestamps)."""
    t = p.trace
    return grid_points(p, capacity_req_per_s, p.seeds[:1], p.repeated_budgets) + share_points(p, capacity_req_per_s) + [
        (f"azure_conv b{t.budget} rows {t.start_offset}-{t.start_offset + t.rows}", None,
         {"workload": "azure_conv", "slo": "ch10", "workload.num_requests": t.rows,
          "workload.trace.start_offset": t.start_offset, "scheduler.budget": t.budget} | _pairs(t.overrides))]


def grid_points(p: FidelityParams, capacity_req_per_s: float, seeds: list[int],
                budgets: list[int] | None = None) -> list[tuple[str, float, dict]]:
    """Each budget (of `budgets`, default all) at each load, per seed; the first seed's labels carry no
    seed (paired.csv's points)."""
    out = []
    for seed in seeds:
        for load in p.loads:
            for budget in p.budgets if budgets is None else budgets:
                out.append((f"{p.workload} b{budget} load {load:g}" + ("" if seed == p.seeds[0] else f" seed {seed}"),
                            load, {"experiment": "ch10", "workload": p.workload, "workload.num_requests": p.num_requests,
                                   "workload.seed": seed, "workload.rate_per_s": round(load * capacity_req_per_s, 4),
                                   "scheduler.budget": budget} | _pairs(p.mix_overrides)))
    return out


def share_points(p: FidelityParams, capacity_req_per_s: float) -> list[tuple[str, float, dict]]:
    """The ch10 mix with another long-prompt share (class 0 long, class 1 short), first seed."""
    out = []
    for share, budget, load in p.shares:
        out.append((f"{p.workload} b{int(budget)} load {load:g} long {100 * share:.0f}%", load,
                    {"experiment": "ch10", "workload": p.workload, "workload.num_requests": p.num_requests,
                     "workload.seed": p.seeds[0], "workload.rate_per_s": round(load * capacity_req_per_s, 4),
                     "scheduler.budget": int(budget), "workload.classes.0.weight": share,
                     "workload.classes.1.weight": round(1 - share, 6)} | _pairs(p.mix_overrides)))
    return out


def _pairs(overrides: list[str]) -> dict:
    return dict(o.split("=", 1) for o in overrides)


SLO_FACTORS = (0.5, 1.0, 2.0)  # a scaled SLO's multiples halved and doubled: does a verdict keep its direction?


def scored_slos(p: FidelityParams, point: dict, base: list[str]) -> dict:
    """{slo name: {factor: its bounds in seconds on this profile}} for the report, which scores every
    measured request under each (an SLO applies after the run). An absolute SLO has factor 1 only."""
    out = {}
    for name in p.slos:
        cfg = compose_run_config(base + [f"{k}={v}" for k, v in point.items()] + [f"slo={name}"])
        factors = SLO_FACTORS if is_scaled(cfg.slo) else (1.0,)
        times = step_times(cfg.model, cfg.engine, cfg.hardware, cfg.scheduler, cfg.workload)
        out[name] = {f"{f:g}": dataclasses.asdict(scaled_seconds(with_multiples(cfg.slo, f), times)) for f in factors}
    return out


def sim_config(sim_base: list[str], pt: dict, step_time_scale: float = 1.0):
    """A point's simulated run: the same requests at the same rate as its measured runs."""
    return compose_run_config(sim_base + [f"{k}={v}" for k, v in pt.items()]
                              + ([f"hardware.step_time_scale={step_time_scale}"] if step_time_scale != 1.0 else []))


def run(p: FidelityParams, profile: Path, probe_only_profile: Path, capacity_csv: Path, out_dir: Path,
        table_path: Path) -> None:
    """Writes out_dir (fidelity.csv, paired.csv, paired_before_after.csv, runs.csv, requests_measured.csv,
    step_error.csv, drift.csv, fidelity_sentinel_scaled.csv, conditions.json, metrics.json) and the
    table at table_path. profile: this machine's profile (fit on probe shapes and serving replays),
    probe_only_profile: its probe-only fit; both named in the conditions as given. capacity_csv: the
    capacity stage's measured capacity, which the loads are fractions of."""
    if not set(p.repeated_budgets) <= set(p.budgets):
        raise SystemExit(f"fidelity: repeated_budgets {p.repeated_budgets} must be among budgets {p.budgets}")
    profiles = {"probe + serving": profile, "probe only": probe_only_profile}
    out_dir.mkdir(parents=True, exist_ok=True)
    base = ["tracking.progress=false", "tracking.experiment_name=dvc_fidelity", "slowdown=false",
            f"engine.profile={profile}", *p.overrides]
    capacity = measured_capacity(capacity_csv)
    pts = [(label, pt) for label, _, pt in points(p, capacity)]
    # measured once, for the report's paired claims: the first seed at the budgets not repeated, the other seeds
    others = (grid_points(p, capacity, p.seeds[:1], [b for b in p.budgets if b not in p.repeated_budgets])
              + grid_points(p, capacity, p.seeds[1:]))
    loads = {label: load for label, load, _ in points(p, capacity) + others}
    # repeats outermost, so a slow spell hits every point alike; then the other seeds, once each
    order = ([(r, label, pt) for r in range(p.repeats) for label, pt in pts]
             + [(0, label, pt) for label, _, pt in others])
    n_repeated = p.repeats * len(pts)  # the runs the simulations are compared with, each between two sentinel readings
    composed = compose_run_config(base)
    sentinel = SpeedSentinel.for_run(composed.model, composed.engine)
    readings = []

    def read(i: int) -> dict:
        if i <= n_repeated:  # before each repeated run, and once after the last (before the other seeds)
            readings.append(sentinel.read())
        return {"sentinel_before": readings[-1].ratio} if i < n_repeated else {}

    res = run_grid("fidelity", base, [pt for _, _, pt in order], runs_dir(), keep_steps=True, before_each=read)
    if len(readings) == n_repeated:  # no other seeds: the reading after the last run
        read(n_repeated)
    # each repeated run's speed: the geometric mean of the sentinels read just before and just after it
    after = [r.ratio for r in readings[1:]] + [float("nan")] * len(others)
    res.runs["sentinel_after"] = after
    res.runs["sentinel_ratio"] = [geometric_mean([a.ratio, b.ratio]) for a, b in zip(readings, readings[1:])] + [
        float("nan")] * len(others)
    labels = [label for _, label, _ in order]
    res.runs.insert(0, "repeat", [r for r, _, _ in order])
    res.runs.insert(0, "point", labels)
    res.runs["load"] = [loads[label] for label in labels]  # of the measured capacity
    shares = {label: pt.get("workload.classes.0.weight") for label, _, pt in share_points(p, capacity)}
    res.runs["long_share"] = [shares.get(label) for label in labels]  # set only on the share cells
    res.runs["measured_capacity_req_per_s"] = capacity
    res.requests.insert(0, "repeat", res.requests["run"].map(lambda i: order[i][0]))
    res.requests.insert(0, "point", res.requests["run"].map(lambda i: labels[i]))
    every = res  # every measured run, written whole; the comparisons below read the repeated points
    repeated = res.runs["point"].isin([label for label, _ in pts])
    order = [o for o, keep in zip(order, repeated) if keep]
    res = dataclasses.replace(res, runs=res.runs[repeated].reset_index(drop=True),
                              requests=res.requests[res.requests["point"].isin([label for label, _ in pts])])
    # Simulated at the very rates the measured runs resolved (same seed, same requests).
    rates = res.runs.groupby("point", sort=False)["rate_per_s"].first()
    sims, paired, tables, errors, runs = {}, {}, {}, {}, [every.runs.assign(executor="torch")]
    for fit, fit_profile in profiles.items():
        sim_base = ["tracking=none", "slowdown=false", f"engine.profile={fit_profile}", *p.overrides]
        cfgs = [sim_config(sim_base, pt) for _, pt in pts]
        sims[fit] = simulate_many(cfgs, p.processes, fn=partial(simulate, view=requests_of))
        sim_req = pd.concat([pd.DataFrame(reqs).assign(point=label) for (label, _), (_, reqs) in zip(pts, sims[fit])])
        errors[fit] = paired_errors(res.requests, sim_req)
        paired[fit] = paired_table(errors[fit])
        sim_runs = pd.DataFrame([{"point": label, "budget": pt["scheduler.budget"], "rate_per_s": rates[label]} | summary
                                 for (label, pt), (summary, _) in zip(pts, sims[fit])]).assign(executor="simulated")
        runs.append(sim_runs.assign(fit=fit))
        tables[fit] = percentile_table(res.runs, sim_runs)
        if fit == "probe + serving":  # the profile the tables' main columns come from
            cond_lines = {"simulated": sim_conditions_line(cfgs[0].model, cfgs[0].engine, cfgs[0].hardware)}
            # Drift-aware: each measured repeat against a simulation of its own, the profile's
            # step times scaled by that repeat's sentinel (and, as a check that cannot be a
            # prediction, by the repeat's own measured / predicted step ratio).
            for name, column in SCALED.items():
                scaled = [sim_config(sim_base, pt, scale)
                          for (_, label, pt), scale in zip(order, res.runs[column])]
                result = simulate_many(scaled, p.processes, fn=partial(simulate, view=requests_of))
                sim_req = pd.concat([pd.DataFrame(reqs).assign(point=label, repeat=r)
                                     for (r, label, _), (_, reqs) in zip(order, result)])
                errors[name] = paired_errors(res.requests, sim_req, per_repeat=True)
                paired[name] = paired_table(errors[name])
                scaled_runs = pd.DataFrame([{"point": label, "repeat": r, "budget": pt["scheduler.budget"],
                                             "rate_per_s": rates[label], "step_time_scale": scale} | summary
                                            for (r, label, pt), scale, (summary, _)
                                            in zip(order, res.runs[column], result)]).assign(executor="simulated")
                runs.append(scaled_runs.assign(fit=f"probe + serving, {name}"))
                tables[name] = percentile_table(res.runs, scaled_runs.groupby("point", sort=False).median(
                    numeric_only=True).reset_index().assign(executor="simulated"))
                cond_lines[f"simulated ({name})"] = sim_conditions_line(scaled[0].model, scaled[0].engine, scaled[0].hardware) + (
                    f"; each repeat its own scale ({column}: {res.runs[column].min():.3f}-{res.runs[column].max():.3f})"
                    + (f", each reading over the sentinel's right after calibration, {sentinel.baseline_ratio:.3f}"
                       if column == "sentinel_ratio" else ""))
    drift = drift_table(res.runs, {"": errors["probe + serving"]} | {name: errors[name] for name in SCALED})
    steps = every.steps.assign(point=every.steps["run"].map(lambda i: labels[i]))
    step_err = step_errors(steps, profile)
    paired["probe + serving"][["point", "metric", "median_rel_error", "p90_rel_error", "n"]].to_csv(
        out_dir / "paired.csv", index=False, float_format="%.4g")
    floor = repeat_floor(res.requests)
    both = pd.concat([t.assign(fit=f) for f, t in paired.items()] + [floor.assign(fit="measured repeat vs repeat")])
    both.to_csv(out_dir / "paired_before_after.csv", index=False, float_format="%.4g")
    table = tables["probe + serving"]
    table.to_csv(out_dir / "fidelity.csv", index=False, float_format="%.6g")
    tables[SENTINEL].to_csv(out_dir / "fidelity_sentinel_scaled.csv", index=False, float_format="%.6g")
    pd.concat(runs).to_csv(out_dir / "runs.csv", index=False, float_format="%.6g")
    every.requests.to_csv(out_dir / "requests_measured.csv", index=False, float_format="%.6g")  # with gaps: the report rescores SLOs
    step_err.to_csv(out_dir / "step_error.csv", index=False, float_format="%.4g")
    drift.to_csv(out_dir / "drift.csv", index=False, float_format="%.4g")
    write_json(out_dir / "slos.json", scored_slos(p, pts[0][1], base))
    lines = {"measured": res.conditions[0]} | cond_lines
    (out_dir / "conditions.json").write_text(json.dumps(lines, indent=2) + "\n")
    write_json(out_dir / "metrics.json", {"fidelity": {  # dvc metrics show: fidelity.<simulation>.<key>
        "as_run": metrics(paired["probe + serving"], table, floor),
        "sentinel_scaled": metrics(paired[SENTINEL], tables[SENTINEL], floor)}})
    md = markdown(p, paired, floor, tables, step_err, drift, lines)
    write_text(table_path, md)
    print(md)


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.fidelity --params params.yaml --profile outputs/profiles/machine.json
        --probe-only-profile outputs/profiles/machine_probe_only.json
        --capacity outputs/capacity/measured_vs_simulated.csv --out outputs/fidelity --table outputs/tables/fidelity.md
    """
    args = arguments(__doc__, "params", "profile", "probe_only_profile", "capacity", "out", "table", argv=argv)
    run(read_section(args.params, "fidelity", FidelityParams), profile=args.profile,
        probe_only_profile=args.probe_only_profile, capacity_csv=args.capacity, out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
