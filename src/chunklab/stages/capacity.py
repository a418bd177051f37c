"""Stage capacity (measured): this machine's capacity found on the real engine, beside the
simulated capacity of this machine's profile, by the same search.

Capacity: the highest Poisson rate at which >= target of one seed's num_requests requests meet
the SLO. Simulated: bisection to sim_rel_tol (exact, seconds). Measured: bisection to rel_tol;
each probe is one real run of num_requests requests, long enough to build a queue.

A speed sentinel (calibration/sentinel.py) is read before every measured probe and after the
last. The measured search starts from a bracket of hi / lo = 1 + rel_tol around the simulated
capacity with every step scaled by the first reading (the machine as it runs now), widened by
`widen` steps until it holds the capacity: where the prediction is right, two probes decide it,
as precisely as more would. The simulated search runs again with every step scaled by the
geometric mean of all the readings.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from chunklab.calibration.sentinel import SpeedSentinel, geometric_mean
from chunklab.experiments import capacity
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.sweep import run_grid
from chunklab.stages.common import arguments, read_section, runs_dir, write_text
from chunklab.stages.typed_yaml import Section


@Section
class CapacityParams:
    workload: str
    budget: int
    num_requests: int
    seed: int
    target: float
    rel_tol: float
    widen: float
    sim_rel_tol: float
    overrides: list[str]


# A measured probe records the simulated probe's keys and how far its steps ran from their prediction.
PROBE_KEYS = capacity.PROBE_KEYS + ("noisy_steps_share", "step_time_vs_predicted_p50")


def run(p: CapacityParams, profile: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (measured_vs_simulated.csv, sentinel_scaled.csv, probes.csv) and the table.
    profile: this machine's profile (engine.profile), named in the table's note as given."""
    base = ["experiment=ch10", f"workload={p.workload}", "slowdown=false", f"engine.profile={profile}",
            f"scheduler.budget={p.budget}", f"workload.num_requests={p.num_requests}",
            f"workload.seed={p.seed}", *p.overrides]
    sim_cfg = compose_run_config(base + ["tracking=none", "engine.executor=simulated"])
    sim = capacity.search(sim_cfg, [p.seed], p.target, p.sim_rel_tol, processes=1)
    conditions = []
    sentinel = SpeedSentinel.for_run(compose_run_config(base))
    readings = [sentinel.read().ratio]  # before every probe and after the last (calibration/sentinel.py)

    def measure(rate: float) -> dict:
        res = run_grid("capacity", base + ["tracking.progress=false", "tracking.experiment_name=dvc_capacity"],
                       [{"workload.rate_per_s": round(rate, 4)}], runs_dir())
        readings.append(sentinel.read().ratio)
        conditions.extend(res.conditions)
        row = res.runs.iloc[0]
        return ({"rate_per_s": float(row["rate_per_s"])} | {k: float(row.get(k, float("nan"))) for k in PROBE_KEYS}
                | {"sentinel_ratio": geometric_mean(readings[-2:])})

    def simulated_at_speed(scale: float) -> capacity.Capacity:
        """The same bisection with every predicted step `scale` times as long."""
        scaled_cfg = compose_run_config(base + ["tracking=none", "engine.executor=simulated",
                                                f"hardware.step_time_scale={scale}"])
        return capacity.search(scaled_cfg, [p.seed], p.target, p.sim_rel_tol, processes=1, start=(1.0, 16.0))

    start = simulated_at_speed(readings[0]).rate_req_per_s
    half = math.sqrt(1 + p.rel_tol)
    real = capacity.bisect(measure, p.target, (start / half, start * half), p.rel_tol, widen=p.widen)
    # The machine's speed over the whole search, and the simulated capacity at that speed.
    scale = geometric_mean(readings)
    scaled = simulated_at_speed(scale)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame([{"budget": p.budget, "measured_req_per_s": real.lo_req_per_s,
                           "simulated_req_per_s": sim.lo_req_per_s,
                           "ratio": real.lo_req_per_s / sim.lo_req_per_s}])
    table.to_csv(out_dir / "measured_vs_simulated.csv", index=False, float_format="%.4g")
    drift = table.assign(sentinel_ratio=scale, simulated_sentinel_scaled_req_per_s=scaled.lo_req_per_s,
                         ratio_sentinel_scaled=real.lo_req_per_s / scaled.lo_req_per_s,
                         sentinel_readings=" ".join(f"{r:.4f}" for r in readings))
    drift.to_csv(out_dir / "sentinel_scaled.csv", index=False, float_format="%.4g")
    probes = pd.concat([pd.DataFrame(real.probes).assign(executor="torch"),
                        pd.DataFrame(sim.probes).assign(executor="simulated")])
    probes.to_csv(out_dir / "probes.csv", index=False, float_format="%.5g")
    detail = drift.drop(columns="sentinel_readings").assign(measured_fails_at=real.hi_req_per_s,
                                                            simulated_fails_at=sim.hi_req_per_s)
    note = (f"MEASURED and SIMULATED on this machine: {p.workload}, budget {p.budget}, one seed ({p.seed}) of "
            f"{p.num_requests} requests per probe; capacity = the highest rate at which >= {p.target:.0%} of "
            f"requests meet the SLO. Simulated with this machine's profile ({profile}), bisected to "
            f"{p.sim_rel_tol:.1%}; measured by bisection to {p.rel_tol:.0%} from a bracket around the simulated "
            f"capacity at the speed the sentinel read before the first probe ({start:.2f} req/s; "
            f"{len(real.probes)} measured probes, each in outputs/capacity/probes.csv). Capacity lies between "
            f"each pair of columns. Sentinel-scaled: the simulated search again, every predicted step times "
            f"{scale:.3f}, the geometric mean of {len(readings)} speed-sentinel readings taken before each measured "
            f"probe and after the last (a short serving replay on the real engine against the profile, over the same "
            f"replay's reading right after calibration, {sentinel.baseline_ratio:.3f}; "
            f"{min(readings):.3f}-{max(readings):.3f}).\n\nConditions: {conditions[0]}")
    write_text(table_path, "### Capacity: measured against simulated, one machine\n\n"
               + detail.to_markdown(index=False, floatfmt=".3f") + "\n\n" + note + "\n")
    print(detail.to_string(index=False))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.capacity --params params.yaml --profile outputs/profiles/machine.json
        --out outputs/capacity --table outputs/tables/capacity.md
    """
    args = arguments(__doc__, "params", "profile", "out", "table", argv=argv)
    run(read_section(args.params, "capacity", CapacityParams), profile=args.profile, out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
