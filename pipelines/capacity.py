"""Stage capacity: each configuration's capacity (highest arrival rate with >= target
of requests in SLO, by bisection) over seeds; every probe doubles as a point of the
rate sweep (goodput and latency against offered load).

Writes outputs/capacity/ (CSV, plots) and outputs/tables/capacity.md.
"""
from __future__ import annotations

import pandas as pd

from chunklab.experiments.capacity import search_capacity
from chunklab.experiments.compose import compose_run_config
from chunklab.metrics.conditions import conditions, conditions_line
from chunklab.model.tiny_gpt import TinyGPT
from chunklab.experiments.sweep import grid
from chunklab.report import figures
from common import OUTPUTS, RUNS, params


def main() -> None:
    p = params("capacity")
    out = OUTPUTS / "capacity"
    out.mkdir(parents=True, exist_ok=True)
    base = ["experiment=ch10", "tracking=none", "tracking.progress=false",
            f"workload.num_requests={p['num_requests']}", *p["overrides"]]
    caps, probes = [], []
    for point in grid({"scheduler.ordering": p["orderings"], "scheduler.budget": p["budgets"], "workload.seed": p["seeds"]}):
        key = {k.split(".")[-1]: v for k, v in point.items()}
        res = search_capacity(base + [f"{k}={v}" for k, v in point.items()], *p["bracket"], p["target"],
                              p["rel_tol"], RUNS / "capacity")
        caps.append(key | {"capacity_req_per_s": res.rate_per_s, "bound": res.bound, "probes": res.trace()})
        probes += [key | pr for pr in res.probes]
        print(f"[capacity] {key}: {res.rate_per_s:.2f} req/s ({res.bound}); probes {res.trace()}", flush=True)
    caps, probes = pd.DataFrame(caps), pd.DataFrame(probes)
    caps.to_csv(out / "capacity.csv", index=False, float_format="%.4g")
    probes.to_csv(out / "rate_sweep.csv", index=False, float_format="%.6g")
    table = (caps.groupby(["ordering", "budget"])["capacity_req_per_s"].agg(["median", "min", "max", "count"])
             .reset_index().rename(columns={"median": "capacity, median (req/s)", "count": "seeds"}))
    note = (f"Capacity: the highest Poisson arrival rate at which >= {p['target']:.0%} of {p['num_requests']} "
            f"requests of the ch10 mix meet the chapter's SLO (TTFT <= 1 s, TPOT <= 50 ms); bisection in log-rate "
            f"over [{p['bracket'][0]}, {p['bracket'][1]}] req/s until hi/lo <= {1 + p['rel_tol']:.2f}; seeds "
            f"{p['seeds']}; a bound of 'above_bracket' means even the top rate passed. Every probe is in "
            f"outputs/capacity/capacity.csv. Short runs reach less queueing than long ones, so these capacities "
            f"are upper estimates for {p['num_requests']}-request bursts.")
    cfg = compose_run_config(base)
    cond = conditions(cfg, TinyGPT(cfg.model).num_parameters())
    cond["workload"] += "; the arrival rate is what the search varies"
    note += f"\n\nConditions: {conditions_line(cond)}"
    (OUTPUTS / "tables").mkdir(exist_ok=True)
    (OUTPUTS / "tables" / "capacity.md").write_text(
        "### Capacity by configuration\n\n" + table.to_markdown(index=False, floatfmt=".2f") + "\n\n" + note + "\n")
    figures.versus_rate(probes, out / "goodput_vs_rate.png",
                        [("goodput_req_per_s", "goodput (req/s)"), ("slo_attainment", "SLO attainment")])
    figures.versus_rate(probes, out / "latency_vs_rate.png",
                        [("ttft_p50_s", "TTFT p50 (s)"), ("ttft_p99_s", "TTFT p99 (s)"), ("itl_p99_s", "ITL p99, per gap (s)")])


if __name__ == "__main__":
    main()
