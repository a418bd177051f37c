"""The figures of the simulated stages and of cost_models, drawn by the plots stage from the CSVs those
stages write: a change to a figure reruns the report stages only, never a simulation or a fit.

Writes under out_dir (outputs/plots):
    simulated/goodput_vs_rate.png            sim_capacity's probes
    simulated/best_budget.png                sim_maps' best budget per load
    simulated/<workload>_heatmaps.png        sim_maps' cells, one per workload
    simulated/queue.png                      sim_traces' queue length over time
    simulated/production_<model>_<hardware>_<workload>_heatmaps.png   sim_production's cells
    simulated/disagg_<model>_<hardware>_<link>.png    sim_disagg's winners: colocated against P/D splits
    cost_models/<device>_fit.png             each GPU fit's operator points
"""
from __future__ import annotations


from pathlib import Path

import pandas as pd

from chunklab.report import figures
from chunklab.report.disagg_figures import winner_map
from chunklab.stages.common import profile_machine, read_section
from chunklab.stages.shared_params import SimParams, VidurDevice
from chunklab.stages.typed_yaml import Section

LOAD_NOTE = "load: a fraction of the default scheduler's simulated capacity"


# The keys of other stages' sections that the captions and file names read (the plots stage's
# `params` in dvc.yaml): views, so the plots stage never imports a simulation stage; each section's
# own stage checks the whole of it.
@Section
class MapsView:
    workloads: list[str]


@Section
class TracesView:
    compressed_time_scale: float


@Section
class CostModelsView:
    devices: list[VidurDevice]


@Section
class DisaggView:
    target: float
    capacity_slo: str
    budgets: list[int]
    tie_margin: float


@Section
class PlotParams:
    sim: SimParams
    sim_maps: MapsView
    sim_traces: TracesView
    cost_models: CostModelsView
    sim_disagg: DisaggView


def read_plot_params(path: Path) -> PlotParams:
    """What the simulated figures read of params.yaml, typed; a mismatch ends the stage in one line."""
    return PlotParams(sim=read_section(path, "sim", SimParams),
                      **{name: read_section(path, name, view, view=True) for name, view in (
                          ("sim_maps", MapsView), ("sim_traces", TracesView), ("cost_models", CostModelsView),
                          ("sim_disagg", DisaggView))})


def make_simulated_plots(p: PlotParams, profile: Path, outputs: Path, out_dir: Path) -> None:
    sim_dir, fit_dir = out_dir / "simulated", out_dir / "cost_models"
    sim_dir.mkdir(parents=True, exist_ok=True)
    fit_dir.mkdir(parents=True, exist_ok=True)
    simulated = f"SIMULATED with the profile of {profile_machine(profile)}"
    per_cell = f"{len(p.sim.seeds)} seeds x {p.sim.num_requests} requests"

    probes = pd.read_csv(outputs / "simulated" / "capacity" / "probes.csv")
    figures.versus_rate(probes, sim_dir / "goodput_vs_rate.png",
                        [("goodput_req_per_s", "goodput (req/s)"), ("slo_attainment", "SLO attainment")],
                        title="Against offered load, by setting (the capacity search's probes)",
                        caption=f"{simulated}; {per_cell} per probe{coinciding(probes)}", hue="setting")

    maps = outputs / "simulated" / "maps"
    cells, best = pd.read_csv(maps / "cells.csv"), pd.read_csv(maps / "best_budget.csv")
    for workload in p.sim_maps.workloads:
        figures.budget_load_heatmaps(cells[cells["workload"] == workload], sim_dir / f"{workload}_heatmaps.png",
                                     f"{workload}, {per_cell} per cell", f"{simulated}; {LOAD_NOTE}")
    figures.best_budget(best, cells, sim_dir / "best_budget.png", f"{simulated}; {LOAD_NOTE}; {per_cell} per cell")

    queue = pd.read_csv(outputs / "simulated" / "traces" / "queue.csv")
    figures.queue_timeline(queue, sim_dir / "queue.png",
                           f"{simulated}; every row of the trace at its own timestamps, and "
                           f"{1 / p.sim_traces.compressed_time_scale:.2f}x faster")

    production = pd.read_csv(outputs / "simulated" / "production" / "cells.csv")
    for (model, hardware, workload), c in production.groupby(["model", "hardware", "workload"], sort=False):
        figures.budget_load_heatmaps(c, sim_dir / f"production_{model}_{hardware}_{workload}_heatmaps.png",
                                     f"{model} on {hardware}, {workload}",
                                     f"SIMULATED: the roofline cost model of the {hardware} preset; {LOAD_NOTE}")

    draw_disagg_maps(p, outputs / "simulated" / "disagg", sim_dir)

    for d in p.cost_models.devices:
        points = pd.read_csv(outputs / "cost_models" / f"{d.name}_points.csv")
        figures.operator_fit(points, fit_dir / f"{d.name}_fit.png", f"Llama-2-7B on {d.name.upper()}: operator times "
                             "against the roofline fit (hollow: held out)",
                             f"MEASURED by Vidur on an {d.name.upper()} (its published profiling data, {d.data}); "
                             f"the roofline of the {d.hardware} preset fit on them (outputs/cost_models/)")


def coinciding(probes: pd.DataFrame) -> str:
    """'; lines that coincide: ...' naming the settings of a workload whose probes are identical (one line
    hides the other), or ''."""
    same = []
    for workload, w in probes.groupby("workload", sort=False):
        curves = {setting: tuple(map(tuple, g[["rate_per_s", "goodput_req_per_s", "slo_attainment"]].round(6).values))
                  for setting, g in w.groupby("setting", sort=False)}
        seen: dict[tuple, list[str]] = {}
        for setting, curve in curves.items():
            seen.setdefault(curve, []).append(setting)
        same += [f"{workload}: {' = '.join(names)}" for names in seen.values() if len(names) > 1]
    return f"; lines that coincide: {'; '.join(same)}" if same else ""


def draw_disagg_maps(p: PlotParams, disagg: Path, sim_dir: Path) -> None:
    """One map per model/device pair and KV link (sim_disagg's winners.csv)."""
    winners, q = pd.read_csv(disagg / "winners.csv"), p.sim_disagg
    for (model, hardware, link), w in winners.groupby(["model", "hardware", "link"], sort=False):
        winner_map(w, sim_dir / f"disagg_{model}_{hardware}_{link}.png",
                   f"SIMULATED: {model} on {hardware}, KV over {link}: split (blue) or colocated (red), goodput per GPU",
                   f"Cell: the winner (C<budget>: colocated, C:slo under the SLO-aware budget; xPyD: the split) and its lead "
                   f"(under {q.tie_margin:.0%}: tie); "
                   "grey: one side serves under 10% within SLO (no ratio). Load: x N x one GPU's capacity.")
