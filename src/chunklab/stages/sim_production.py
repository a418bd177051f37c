"""Stage sim_production (simulated): the chapter's budget question at production scale.

Model-device pairs priced by the roofline cost model of their hardware preset (conf/hardware/),
with vLLM's serving limits (256 running sequences, the KV pool sized from memory). Per pair and
workload: capacity under the default scheduler (budget 512, decode_first), then budgets x loads
maps (load x that capacity), the chapter's table at one load, and a published experiment set up
as closely as we can (Sarathi-Serve's Mistral-7B on one A100, chunked against vLLM's scheduler).
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd

from chunklab.config import RunConfig
from chunklab.experiments.capacity import QUEUE_KEYS, Capacity, at_rate, natural_rate, search, seeds_for
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.load import reference_config
from chunklab.experiments.simulate import regime_of, simulate, simulate_many
from chunklab.metrics.conditions import sim_conditions_line
from chunklab.stages.common import arguments, read_section, write_text
from chunklab.stages.typed_yaml import Section


@Section
class PublishedSlo:
    name: str
    p99_tbt_s: float
    budget: int
    published_ratio: str


@Section
class PublishedParams:
    model: str
    hardware: str
    workload: str
    overrides: list[str]
    median_delay_s: float
    vllm: dict[str, int | str]  # scheduler knobs of each side
    sarathi: dict[str, int | str]
    slos: list[PublishedSlo]


@Section
class SimProductionParams:
    pairs: list[tuple[str, str]]  # (model, hardware)
    workloads: list[str]
    trace_workloads: list[str]
    trace_rows: int
    num_requests: int
    seeds: list[int]
    slo: str
    target: float
    capacity_rel_tol: float
    budgets: list[int]
    loads: list[float]
    table_load: float
    processes: int
    overrides: list[str]
    published: PublishedParams


DEFAULT_START = (2.0, 16.0)  # req/s: search()'s default bracket
PUBLISHED_START = (0.25, 2.0)  # Mistral-7B on one A100 serves a few requests a second of the trace
METRICS = ["goodput_req_per_s", "slo_attainment", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s",
           "worst_stall_s", "tpot_p50_s", "output_tokens_per_s", "prefill_step_share", "running_mean"]


def base_config(model: str, hardware: str, workload: str, p: SimProductionParams, extra: tuple[str, ...] = ()) -> RunConfig:
    size = p.trace_rows if workload in p.trace_workloads else p.num_requests
    return compose_run_config(["engine=simulated", "tracking=none", f"model={model}", f"hardware={hardware}",
                               f"workload={workload}", f"workload.num_requests={size}", f"slo={p.slo}", *p.overrides,
                               *extra])


def with_scheduler(cfg: RunConfig, **knobs) -> RunConfig:
    return dataclasses.replace(cfg, scheduler=dataclasses.replace(cfg.scheduler, **knobs))


def capacity_search(job: tuple[RunConfig, SimProductionParams, "SarathiCriterion | None", tuple[float, float]]) -> Capacity:
    """One capacity search (a pool task: its probes run one at a time, so the pool runs whole searches
    side by side; a trace probe is a single run and would leave a process idle)."""
    cfg, p, criterion, start = job
    target = 0.0 if criterion else p.target
    return search(cfg, p.seeds, target, p.capacity_rel_tol, processes=1, criterion=criterion, start=start,
                  keys=QUEUE_KEYS)


def pair_capacities(cases: list[tuple[str, str, str]], bases: list[RunConfig], p: SimProductionParams) -> list[Capacity]:
    """Each (model, hardware, workload)'s capacity under the default scheduler, searched in parallel."""
    jobs = [(reference_config(base), p, None, DEFAULT_START) for base in bases]
    found = simulate_many(jobs, p.processes, fn=capacity_search, label="sim_production capacity searches")
    for (model, hardware, workload), cap in zip(cases, found):
        if cap.rate_req_per_s <= 0:
            raise SystemExit(f"sim_production: {model} on {hardware} serves no rate of {workload} within slo={p.slo} "
                             f"(probes: {cap.probes[:2]}): a prompt longer than the context, or an SLO it cannot meet")
    return found


def grid_configs(base: RunConfig, cap: float, p: SimProductionParams) -> tuple[list, list]:
    """The budgets x loads x seeds runs of one case: their (budget, load, seed) keys and configs."""
    trace_rate = natural_rate(base.workload, base.model) if base.workload.kind == "trace" else None
    grid = list(itertools.product(p.budgets, p.loads, seeds_for(base.workload, p.seeds)))
    return grid, [at_rate(with_scheduler(base, budget=b), load * cap, s, trace_rate) for b, load, s in grid]


def case_cells(model: str, hardware: str, workload: str, cap: float, grid: list, summaries: list[dict]) -> pd.DataFrame:
    """One case's runs, as cells: each metric's mean over seeds (worst stall: the max)."""
    key = {"model": model, "hardware": hardware, "workload": workload}
    runs = pd.DataFrame([key | {"budget": b, "load": load, "seed": s, "rate_per_s": load * cap}
                         | {m: summ.get(m) for m in METRICS} for (b, load, s), summ in zip(grid, summaries)])
    agg = {m: "mean" for m in METRICS} | {"worst_stall_s": "max", "rate_per_s": "first"}
    return runs.groupby(list(key) + ["budget", "load"]).agg(agg).reset_index()


def chunking_gain(cells: pd.DataFrame) -> pd.DataFrame:
    """Per pair, workload and load: the best budget's goodput against the unchunked one's (the
    largest budget, which holds any prompt whole) and against the default 512."""
    rows = []
    for key, g in cells.groupby(["model", "hardware", "workload", "load"]):
        best = g.sort_values(["goodput_req_per_s", "ttft_p99_s"], ascending=[False, True]).iloc[0]
        whole = g[g["budget"] == g["budget"].max()].iloc[0]
        rows.append(dict(zip(["model", "hardware", "workload", "load"], key)) | {
            "best_budget": int(best["budget"]), "best_goodput_req_per_s": best["goodput_req_per_s"],
            "unchunked_budget": int(whole["budget"]), "unchunked_goodput_req_per_s": whole["goodput_req_per_s"],
            "gain_vs_unchunked": best["goodput_req_per_s"] / whole["goodput_req_per_s"]
            if whole["goodput_req_per_s"] > 0 else float("inf"),
            "unchunked_worst_stall_s": whole["worst_stall_s"], "best_worst_stall_s": best["worst_stall_s"],
            "prefill_step_share": best["prefill_step_share"]})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class SarathiCriterion:
    """Sarathi-Serve's capacity: P99 time-between-tokens over all tokens within the SLO and the
    median scheduling delay within delay_s (a class, not a closure: a pool task carries it)."""
    tbt_slo_s: float
    delay_s: float

    def __call__(self, probe: dict) -> bool:
        return probe["itl_p99_s"] <= self.tbt_slo_s and probe["queue_p50_s"] <= self.delay_s


def published(p: SimProductionParams) -> pd.DataFrame:
    q = p.published
    base = base_config(q.model, q.hardware, q.workload, p, tuple(q.overrides))
    labels = ("vllm", "sarathi")
    jobs = [(with_scheduler(base, **knobs), p, SarathiCriterion(slo.p99_tbt_s, q.median_delay_s), PUBLISHED_START)
            for slo in q.slos for knobs in (q.vllm, q.sarathi | {"budget": slo.budget})]
    found = iter(simulate_many(jobs, p.processes, fn=capacity_search, label="sim_production published searches"))
    rows = []
    for slo in q.slos:
        caps = {label: next(found).rate_req_per_s for label in labels}
        rows.append({"slo": slo.name, "p99_tbt_slo_s": slo.p99_tbt_s, "sarathi_budget": slo.budget,
                     "vllm_capacity_req_per_s": caps["vllm"], "sarathi_capacity_req_per_s": caps["sarathi"],
                     "ratio": caps["sarathi"] / caps["vllm"] if caps["vllm"] else float("inf"),
                     "published_ratio": slo.published_ratio})
    return pd.DataFrame(rows)


def chapter_table(cells: pd.DataFrame, load: float) -> str:
    view = cells[cells["load"] == load].astype({"budget": int})[["budget", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s",
                                         "worst_stall_s", "goodput_req_per_s", "slo_attainment",
                                         "prefill_step_share"]]
    view = view.rename(columns={"ttft_p50_s": "TTFT p50 (s)", "ttft_p99_s": "TTFT p99 (s)", "itl_p50_s": "ITL p50 (s)",
                                "itl_p99_s": "ITL p99 (s)", "worst_stall_s": "worst stall (s)",
                                "goodput_req_per_s": "goodput (req/s)", "slo_attainment": "in SLO",
                                "prefill_step_share": "steps with a prefill"})
    return view.to_markdown(index=False, floatfmt=(".0f",) + (".3f",) * (view.shape[1] - 1))  # budgets as integers


def run(p: SimProductionParams, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (capacity.csv, probes.csv, cells.csv, chunking_gain.csv, published.csv;
    the plots stage draws the cells) and the table at table_path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = [(m, h, w) for (m, h), w in itertools.product(p.pairs, p.workloads)]
    bases = [base_config(m, h, w, p) for m, h, w in cases]
    found = pair_capacities(cases, bases, p)
    grids = [grid_configs(base, cap.rate_req_per_s, p) for base, cap in zip(bases, found)]
    summaries = iter(simulate_many([c for _, cfgs in grids for c in cfgs], p.processes,
                                   fn=partial(simulate, view=regime_of), label="sim_production grid"))
    caps, probes, cells = [], [], []
    for (model, hardware, workload), base, cap, (grid, _) in zip(cases, bases, found, grids):
        key = {"model": model, "hardware": hardware, "workload": workload}
        caps.append(key | {"num_blocks": base.engine.num_blocks, "max_num_seqs": base.scheduler.max_num_seqs,
                           "capacity_req_per_s": cap.rate_req_per_s, "hi_req_per_s": cap.hi_req_per_s})
        probes.extend(key | probe for probe in cap.probes)
        cells.append(case_cells(model, hardware, workload, cap.rate_req_per_s, grid, [next(summaries) for _ in grid]))
        print(f"[sim_production] {model} {hardware} {workload}: capacity {cap.rate_req_per_s:.3f} req/s", flush=True)
    cells = pd.concat(cells, ignore_index=True)
    gain = chunking_gain(cells)
    pub = published(p)
    for name, frame in (("capacity", pd.DataFrame(caps)), ("probes", pd.DataFrame(probes)), ("cells", cells),
                        ("chunking_gain", gain), ("published", pub)):
        frame.to_csv(out_dir / f"{name}.csv", index=False, float_format="%.6g")
    write_tables(p, pd.DataFrame(caps), cells, gain, pub, table_path)


def write_tables(p: SimProductionParams, caps: pd.DataFrame, cells: pd.DataFrame, gain: pd.DataFrame, pub: pd.DataFrame,
                 table_path: Path) -> None:
    md = ["### Production scale (simulated, roofline cost model)", ""]
    for (model, hardware), g in cells.groupby(["model", "hardware"], sort=False):
        cfg = base_config(model, hardware, p.workloads[0], p)
        md += [f"**{model} on {hardware}**: {sim_conditions_line(cfg.model, cfg.engine, cfg.hardware)}. KV pool {cfg.engine.num_blocks:,} blocks of "
               f"{cfg.engine.block_size} tokens, at most {cfg.scheduler.max_num_seqs} running sequences.", ""]
        for workload, w in g.groupby("workload", sort=False):
            cap = caps[(caps["model"] == model) & (caps["hardware"] == hardware) & (caps["workload"] == workload)]
            md += [f"*{workload}* at load {p.table_load} (capacity {float(cap['capacity_req_per_s'].iloc[0]):.2f} "
                   "req/s under the default scheduler, budget 512):", "", chapter_table(w, p.table_load), ""]
    md += ["Best budget against the unchunked one (the largest budget holds any prompt whole), per load:", "",
           gain.to_markdown(index=False, floatfmt=".3f"), "",
           "Against a published result (Sarathi-Serve's capacity of chunked prefills over vLLM's scheduler, set up "
           "as described in docs/production-scale.md):", "", pub.to_markdown(index=False, floatfmt=".3f"), "",
           f"SIMULATED. Budgets {p.budgets} x loads {p.loads} (x each workload's capacity), seeds "
           f"{p.seeds} (trace: its first {p.trace_rows} rows, one seed), {p.num_requests} requests per "
           f"synthetic run, SLO slo={p.slo}. Every cell: outputs/simulated/production/cells.csv.", ""]
    write_text(table_path, "\n".join(md))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_production --params params.yaml --out outputs/simulated/production
        --table outputs/simulated/tables/production.md
    """
    args = arguments(__doc__, "params", "out", "table", argv=argv)
    run(read_section(args.params, "sim_production", SimProductionParams), out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
