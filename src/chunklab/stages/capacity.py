"""Stage capacity (measured): this machine's capacity per token budget and SLO, found on the real
engine, beside the simulated capacity of this machine's profile, by the same search.

Capacity (the one definition, everywhere in the report): the highest Poisson rate at which >= target
of the requests meet the SLO, pooled over runs of `num_requests` requests of each of `seeds`: the
length of the fidelity stage's load runs too, so a load means one thing. Each (budget, SLO) cell is
searched:
- simulated on the same seeds, bisected to sim_rel_tol (exact; every simulated search runs first, in parallel);
- measured by bisection to rel_tol, each probe one real run per seed of the same requests: a first
  probe at the simulated capacity with every step scaled by the speed sentinel's reading before it
  (the machine as it runs now). Its share within the SLO within `near` of the target: the bracket of
  hi / lo = 1 + rel_tol starts at that probe (start_bracket). Farther: the simulated curve read against
  that share (experiments/capacity.rate_factor) moves the bracket to where it puts the measured
  capacity. The bracket widens by steps of `widen`, each further step the square of the last, until
  it holds the capacity. Where the start is right, two probes decide it (three after a correction);
- simulated again for each of `sim_seeds` alone (the spread over arrival draws that a few measured
  seeds cannot show), and at steady_requests requests pooled over two seeds (how far a run of
  num_requests is from steady state).

The first cell (reference_budget, reference_slo) is the capacity every load of the chapter's
measured sections is a fraction of (stages/common.measured_capacity reads its row first).
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from chunklab.calibration.sentinel import SpeedSentinel, geometric_mean
from chunklab.experiments import capacity
from chunklab.config import RunConfig
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.simulate import simulate_many
from chunklab.experiments.slo import describe
from chunklab.experiments.sweep import run_grid
from chunklab.stages.common import arguments, read_section, runs_dir, write_text
from chunklab.stages.typed_yaml import Section


@Section
class CapacityParams:
    workload: str
    budgets: list[int]
    slos: list[str]  # conf/slo/ names; every cell is searched under each
    reference_budget: int  # the cell every load of the measured sections is a fraction of
    reference_slo: str
    extra_cells: list[tuple[int, str]]  # [budget, slo] measured too: the reference of a section whose SLO is another
    num_requests: int
    seeds: list[int]  # every probe pools one run of each
    sim_seeds: list[int]
    steady_requests: int
    target: float
    rel_tol: float
    near: float  # the first probe's share within the SLO this close to target: the bracket starts at the probe
    widen: float
    sim_rel_tol: float
    processes: int  # simulated searches in parallel (before any measured probe)
    overrides: list[str]


COLUMNS = ["budget", "slo", "measured_req_per_s", "measured_fails_at", "simulated_req_per_s", "ratio", "sim_seeds_min",
           "sim_seeds_median", "sim_seeds_max", "sim_steady_req_per_s", "sim_steady_requests", "sentinel_ratio",
           "simulated_sentinel_scaled_req_per_s", "measured_probes"]
SPREAD_REL_TOL = 0.02  # the spread and steady-state columns: context for the measured one, not searched as finely
# A measured probe records the simulated probe's keys and how far its steps ran from their prediction.
PROBE_KEYS = capacity.PROBE_KEYS + ("noisy_steps_share", "step_time_vs_predicted_p50")


def measured_cells(p: CapacityParams) -> list[tuple[int, str]]:
    """The cells searched on the real engine: the reference, and the extra cells (other sections' references)."""
    return [(p.reference_budget, p.reference_slo)] + [(int(b), str(s)) for b, s in p.extra_cells]


def cells(p: CapacityParams) -> list[tuple[int, str]]:
    """(budget, slo) in search order, the reference cell first."""
    ref = (p.reference_budget, p.reference_slo)
    grid = [(b, s) for s in p.slos for b in p.budgets if (b, s) != ref]
    return [ref] + grid + [(int(b), str(s)) for b, s in p.extra_cells if (int(b), str(s)) not in grid + [ref]]


def simulated_search(job: tuple) -> capacity.Capacity:
    """(cfg, seeds, target, rel_tol): the simulated capacity (a worker of simulate_many)."""
    cfg, seeds, target, rel_tol = job
    return capacity.search(cfg, list(seeds), target, rel_tol, processes=1, start=(1.0, 16.0))


def start_bracket(first: dict, target: float, near: float, rel_tol: float, factor) -> tuple[float, float]:
    """The measured search's first bracket (hi / lo = 1 + rel_tol) from `first`, one probe at the simulated
    capacity. Its share within the SLO within `near` of target: the probe is the bracket's end, its low
    one if it passed, its high one if not (the curve is flattest there: a share that close cannot tell the
    simulator's error from a repeat's noise, so reading the curve against it would move the start by
    noise). Farther: centred on the probe's rate / factor() (rate_factor: where the simulated curve read
    against that share puts the measured capacity; None, uncorrected)."""
    rate, share, width = first["rate_per_s"], first["slo_attainment"], 1 + rel_tol
    if abs(share - target) <= near:
        return (rate, rate * width) if share >= target else (rate / width, rate)
    centre = rate / (factor() or 1.0)
    return centre / math.sqrt(width), centre * math.sqrt(width)


def measured_search(measure, start: float, p: CapacityParams, factor) -> capacity.Capacity:
    """The measured capacity: a first probe at `start` (the simulated capacity), the bracket start_bracket
    gives, then capacity.bisect. factor(share) -> rate_factor of the first probe's share."""
    first = measure(start)
    bracket = start_bracket(first, p.target, p.near, p.rel_tol, lambda: factor(first["slo_attainment"]))
    found = capacity.bisect(lambda rate: first if rate == first["rate_per_s"] else measure(rate), p.target, bracket,
                            p.rel_tol, widen=p.widen, grow=True)  # (the rate a probe ran at: measure rounds it)
    if all(probe is not first for probe in found.probes):  # a search away from it: it narrows where it falls inside
        found = with_probe(found, first, p.target)
    return found


def with_probe(found: capacity.Capacity, probe: dict, target: float) -> capacity.Capacity:
    """found with one more probe taken before its search: the bracket narrows where the probe falls inside
    it (one that contradicts it, a pass above or a failure below, is noise and leaves it)."""
    rate, passed = probe["rate_per_s"], probe["slo_attainment"] >= target
    lo, hi = found.lo_req_per_s, found.hi_req_per_s
    if lo < rate < hi:
        lo, hi = (rate, hi) if passed else (lo, rate)
    return capacity.Capacity(lo, hi, [probe] + found.probes)


def run(p: CapacityParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (measured_vs_simulated.csv, sentinel_scaled.csv, probes.csv) and the table.
    profile: this machine's profile (engine.profile), named in the table's note as given."""
    if p.reference_budget not in p.budgets or p.reference_slo not in p.slos:
        raise SystemExit(f"capacity: reference cell (budget {p.reference_budget}, slo {p.reference_slo}) "
                         f"must be one of budgets {p.budgets} and slos {p.slos}")
    common = ["experiment=ch10", f"workload={p.workload}", "slowdown=false", f"engine.profile={profile}",
              f"workload.num_requests={p.num_requests}", *p.overrides]
    composed = compose_run_config(common)
    sentinel = SpeedSentinel.for_run(composed.model, composed.engine)
    readings: list[float] = []
    conditions: list[str] = []
    rows, probe_frames, slo_text = [], [], {}

    def sim_cfg(budget: int, slo: str, scale: float = 1.0, extra: tuple[str, ...] = ()) -> RunConfig:
        return compose_run_config(common + [f"scheduler.budget={budget}", f"slo={slo}", "tracking=none",
                                            "engine.executor=simulated", f"hardware.step_time_scale={scale}", *extra])

    # Every simulated search first, in parallel (nothing measured runs beside them): per cell the measured
    # seeds pooled, each of sim_seeds alone, and steady_requests requests pooled over seeds 1 and 2.
    per_cell = 2 + len(p.sim_seeds)
    jobs = []
    for budget, slo in cells(p):
        cfg = sim_cfg(budget, slo)
        jobs += [(cfg, tuple(p.seeds), p.target, p.sim_rel_tol)]
        jobs += [(cfg, (s,), p.target, SPREAD_REL_TOL) for s in p.sim_seeds]
        jobs += [(sim_cfg(budget, slo, extra=(f"workload.num_requests={p.steady_requests}",)), (1, 2), p.target,
                  SPREAD_REL_TOL)]
    found = simulate_many(jobs, p.processes, fn=simulated_search, label="capacity")
    for k, (budget, slo) in enumerate(cells(p)):
        sim, *per_seed_found, steady = found[k * per_cell:(k + 1) * per_cell]
        per_seed = [c.lo_req_per_s for c in per_seed_found]

        def simulated(scale: float) -> capacity.Capacity:
            """The measured seeds pooled, every step scaled by `scale` (the sentinel's reading)."""
            return simulated_search((sim_cfg(budget, slo, scale), tuple(p.seeds), p.target, p.sim_rel_tol))

        base = common + [f"scheduler.budget={budget}", f"slo={slo}"]
        slo_text[slo] = describe(jobs[k * per_cell][0].slo)
        row = {"budget": budget, "slo": slo, "simulated_req_per_s": sim.lo_req_per_s,
               "sim_seeds_min": min(per_seed), "sim_seeds_median": float(pd.Series(per_seed).median()),
               "sim_seeds_max": max(per_seed), "sim_steady_req_per_s": steady.lo_req_per_s,
               "sim_steady_requests": p.steady_requests}
        probe_frames.append(pd.DataFrame(sim.probes).assign(executor="simulated", budget=budget, slo=slo))
        if (budget, slo) not in measured_cells(p):  # measured by the fidelity grid's runs instead (the report's)
            rows.append(row)
            continue
        cell_readings = [sentinel.read().ratio]

        def measure(rate: float) -> dict:
            """One run per seed at this rate; each key's mean over them (equal sizes: the pooled attainment)."""
            res = run_grid("capacity", base + ["tracking.progress=false", "tracking.experiment_name=dvc_capacity"],
                           [{"workload.rate_per_s": round(rate, 4), "workload.seed": s} for s in p.seeds], runs_dir())
            cell_readings.append(sentinel.read().ratio)
            conditions.extend(res.conditions)
            runs = res.runs
            return ({"rate_per_s": float(runs["rate_per_s"].iloc[0])}
                    | {k: float(runs[k].mean()) if k in runs else float("nan") for k in PROBE_KEYS}
                    | {"seeds_attainment": " ".join(f"{a:.3f}" for a in runs["slo_attainment"]),
                       "sentinel_ratio": geometric_mean(cell_readings[-2:])})

        start = simulated(cell_readings[0]).rate_req_per_s
        if start > 0:  # one probe at the simulated capacity, then a bracket at it or where the simulated curve puts it
            scaled = sim_cfg(budget, slo, cell_readings[0])
            real = measured_search(measure, start, p, lambda share: capacity.rate_factor(
                share, lambda rate: capacity.probe(scaled, rate, p.seeds, p.processes)["slo_attainment"], start))
        else:  # the simulation serves no rate within this SLO: halving from 1 req/s finds whether the machine does
            real = capacity.bisect(measure, p.target, (1.0, 1.0 + p.rel_tol), p.rel_tol, widen=2.0, grow=True)
        readings.extend(cell_readings)
        scale = geometric_mean(cell_readings)
        rows.append(row | {"measured_req_per_s": real.lo_req_per_s, "measured_fails_at": real.hi_req_per_s,
                           "ratio": real.lo_req_per_s / sim.lo_req_per_s if sim.lo_req_per_s else math.nan,
                           "sentinel_ratio": scale,
                           "simulated_sentinel_scaled_req_per_s": simulated(scale).lo_req_per_s,
                           "measured_probes": len(real.probes)})
        probe_frames.append(pd.DataFrame(real.probes).assign(executor="torch", budget=budget, slo=slo))
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    table = table[[c for c in COLUMNS if c in table]]
    table.to_csv(out_dir / "measured_vs_simulated.csv", index=False, float_format="%.4g")
    drift = table[["budget", "slo", "measured_req_per_s", "simulated_req_per_s", "sentinel_ratio",
                   "simulated_sentinel_scaled_req_per_s"]].assign(
        ratio_sentinel_scaled=table["measured_req_per_s"] / table["simulated_sentinel_scaled_req_per_s"])
    drift.to_csv(out_dir / "sentinel_scaled.csv", index=False, float_format="%.4g")
    pd.concat(probe_frames).to_csv(out_dir / "probes.csv", index=False, float_format="%.5g")
    write_text(table_path, markdown(p, table, slo_text, profile, readings, sentinel.baseline_ratio, conditions[0]))
    print(table.to_string(index=False))


def markdown(p: CapacityParams, table: pd.DataFrame, slo_text: dict[str, str], profile: Path,
             readings: list[float], baseline: float, conditions: str) -> str:
    """Two tables of at most 8 columns: the measured cells against simulated, then every cell simulated."""
    ref = table.iloc[0]
    main = table[table["measured_req_per_s"].notna()][["slo", "budget", "measured_req_per_s", "measured_fails_at", "simulated_req_per_s", "ratio",
                  "measured_probes"]].rename(columns={
                      "measured_req_per_s": "measured (req/s)", "measured_fails_at": "measured fails at (req/s)",
                      "simulated_req_per_s": "simulated (req/s)", "ratio": "measured / simulated",
                      "measured_probes": "probes"}).astype({"probes": int})
    spread = table[["slo", "budget", "simulated_req_per_s", "sim_seeds_min", "sim_seeds_median", "sim_seeds_max",
                    "sim_steady_req_per_s"]].rename(columns={"simulated_req_per_s": "seeds pooled (req/s)",
                        "sim_seeds_min": "seeds min (req/s)", "sim_seeds_median": "seeds median (req/s)",
                        "sim_seeds_max": "seeds max (req/s)",
                        "sim_steady_req_per_s": f"{p.steady_requests} requests (req/s)"})
    slos = "; ".join(f"`{name}`: {text}" for name, text in slo_text.items())
    return "\n\n".join([
        "### Reference capacity: measured against simulated, one machine",
        f"Capacity: the highest Poisson rate at which >= {p.target:.0%} of the requests meet the SLO, pooled over "
        f"one run of {p.num_requests} requests for each of seeds {', '.join(map(str, p.seeds))}; the fidelity "
        "stage's load runs have the same length, and their loads are "
        f"fractions of budget {p.reference_budget}'s capacity under `{p.reference_slo}` "
        f"({ref['measured_req_per_s']:.2f} req/s measured). SLOs on this machine's profile: {slos}.",
        main.to_markdown(index=False, floatfmt=".2f"),
        "Every other budget and SLO is measured by the fidelity stage's grid (five seeds at three loads, every "
        "run scored under each SLO): the report's capacity table. "
        f"Measured by bisection to {p.rel_tol:.0%}: a first probe at the simulated capacity (at the speed the "
        f"sentinel read before it); a bracket of {1 + p.rel_tol:.2f} starting at that probe where its share within "
        f"the SLO is within {p.near:.0%} of {p.target:.0%}, else where the simulated curve read against that share "
        f"puts the capacity; widened by {p.widen:g}, then each step its square, "
        f"until it holds the capacity; capacity lies between the measured columns. Simulated with "
        f"this machine's profile ({profile}), bisected to {p.sim_rel_tol:.1%}. Every probe: "
        "outputs/capacity/probes.csv.",
        "SIMULATED, every budget and SLO: the measured seeds pooled, and (bisected to 2%) each of seeds "
        + ", ".join(map(str, p.sim_seeds)) + f" alone ({p.num_requests} requests; the spread over arrival draws) and "
        f"{p.steady_requests} requests pooled over seeds 1 and 2 (how far {p.num_requests} requests are from steady "
        "state). Sentinel-scaled (outputs/capacity/sentinel_scaled.csv): the measured cells simulated again with every "
        "step scaled by the geometric mean of the speed sentinel's readings around their probes "
        f"({min(readings):.3f}-{max(readings):.3f} over the reading right after calibration, {baseline:.3f}).",
        spread.to_markdown(index=False, floatfmt=".2f"),
        f"Conditions (first probe): {conditions}", ""])


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.capacity --params params.yaml --profile outputs/profiles/machine.json
        --out outputs/capacity --table outputs/tables/capacity.md
    """
    args = arguments(__doc__, "params", "profile", "out", "table", argv=argv)
    run(read_section(args.params, "capacity", CapacityParams), profile=args.profile, out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
