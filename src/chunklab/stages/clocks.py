"""Stage clocks (measured): are latencies on the replay clock the latencies a wall-clock run sees?

The replay clock (engine/clock.py) times every step with perf_counter and jumps over idle time
instead of sleeping; the wall clock sleeps until the next arrival. Every other measured stage runs
on replay. Here the same requests (one seed) run on both clocks, `repeats` times each, interleaved,
at each load of the reference capacity (the capacity stage's), and are paired request by request:
- replay vs wall: the median per-request |a - b| / b of TTFT, end-to-end latency and mean gap,
  every replay repeat against every wall repeat;
- the floor: the same error between two repeats on one clock (replay vs replay, wall vs wall).
The clocks agree at a load when replay vs wall is within the larger of the two floors (x FLOOR_SLACK)
for every metric.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.experiments.fidelity import paired_errors, paired_table
from chunklab.experiments.sweep import run_grid
from chunklab.stages.common import arguments, measured_capacity, read_section, runs_dir, write_json, write_text
from chunklab.stages.typed_yaml import Section

CLOCKS = ("replay", "wall")
FLOOR_SLACK = 1.1  # a cross-clock error this close to the floor is the floor (medians of a few hundred pairs)


@Section
class ClocksParams:
    workload: str
    budget: int
    loads: list[float]  # of the reference capacity (the capacity stage's first row)
    num_requests: int
    seed: int
    repeats: int
    overrides: list[str]


def errors_between(a: pd.DataFrame, b: pd.DataFrame, what: str) -> pd.DataFrame:
    """Every repeat of a against every repeat of b (a different run), paired by request id."""
    frames = []
    for ra, x in a.groupby("repeat"):
        for rb, y in b.groupby("repeat"):
            if x is y or (what.split(" vs ")[0] == what.split(" vs ")[-1] and ra >= rb):
                continue  # each pair of repeats once; never a run against itself
            frames.append(paired_errors(x.assign(point=what), y.drop(columns=["repeat"]).assign(point=what)))
    return paired_table(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()


def run(p: ClocksParams, profile: Path, capacity_csv: Path, out_dir: Path, table_path: Path) -> None:
    """Writes out_dir (runs.csv, paired.csv, metrics.json) and the table."""
    capacity = measured_capacity(capacity_csv)
    base = ["experiment=ch10", f"workload={p.workload}", "slowdown=false", f"engine.profile={profile}",
            f"workload.num_requests={p.num_requests}", f"workload.seed={p.seed}", f"scheduler.budget={p.budget}",
            "tracking.progress=false", "tracking.experiment_name=dvc_clocks", *p.overrides]
    order = [(r, load, clock) for r in range(p.repeats) for load in p.loads for clock in CLOCKS]  # interleaved
    res = run_grid("clocks", base, [{"workload.rate_per_s": round(load * capacity, 4), "engine.clock": clock}
                                    for _, load, clock in order], runs_dir())
    res.runs.insert(0, "repeat", [r for r, _, _ in order])
    res.runs.insert(0, "load", [load for _, load, _ in order])
    res.requests.insert(0, "repeat", res.requests["run"].map(lambda i: order[i][0]))
    res.requests.insert(0, "load", res.requests["run"].map(lambda i: order[i][1]))
    res.requests.insert(0, "clock_name", res.requests["run"].map(lambda i: order[i][2]))
    rows = []
    for load, at in res.requests.groupby("load", sort=False):
        on = {c: at[at["clock_name"] == c] for c in CLOCKS}
        for what, a, b in (("replay vs wall", on["replay"], on["wall"]), ("replay vs replay", on["replay"], on["replay"]),
                           ("wall vs wall", on["wall"], on["wall"])):
            t = errors_between(a, b, what)
            rows += [{"load": load, "rate_per_s": round(load * capacity, 4), "pair": what} | r
                     for r in t.drop(columns="point").to_dict("records")]
    paired = pd.DataFrame(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    res.runs.to_csv(out_dir / "runs.csv", index=False, float_format="%.6g")
    paired.to_csv(out_dir / "paired.csv", index=False, float_format="%.4g")
    wide = paired.pivot_table(index=["load", "rate_per_s", "metric"], columns="pair", values="median_rel_error",
                              sort=False).reset_index()
    wide["floor"] = wide[["replay vs replay", "wall vs wall"]].max(axis=1)
    wide["within floor"] = wide["replay vs wall"] <= FLOOR_SLACK * wide["floor"]
    agree = {f"load_{str(load).replace('.', '_')}": bool(g["within floor"].all()) for load, g in wide.groupby("load")}
    write_json(out_dir / "metrics.json", {"clocks": {"agree": agree, "replay_vs_wall_over_floor_max": round(float(
        (wide["replay vs wall"] / wide["floor"]).max()), 4)}})
    runs = res.runs.assign(clock=[c for _, _, c in order])
    latency = ["ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s"]
    g = runs.groupby(["load", "clock"], sort=False)
    percentiles = (g[latency].median().mul(1e3).round(2)
                   .join(g[["step_time_vs_predicted_p50"]].median().round(3)).reset_index()
                   .rename(columns={"ttft_p50_s": "TTFT p50 (ms)", "ttft_p99_s": "TTFT p99 (ms)",
                                    "itl_p50_s": "ITL p50 (ms)", "itl_p99_s": "ITL p99 (ms)",
                                    "step_time_vs_predicted_p50": "step / predicted, p50"}))
    show = wide.assign(**{c: (100 * wide[c]).map("{:.1f}%".format)
                          for c in ("replay vs wall", "replay vs replay", "wall vs wall")})
    show = show[["load", "rate_per_s", "metric", "replay vs wall", "replay vs replay", "wall vs wall", "within floor"]]
    verdict = "; ".join(f"load {load:g}: {'agree' if ok else 'differ'}" for load, ok in
                        zip(p.loads, agree.values()))
    write_text(table_path, "\n\n".join([
        "### Replay clock against wall clock, the same requests",
        f"MEASURED. The ch10 mix, {p.num_requests} requests (seed {p.seed}), budget {p.budget}, at loads "
        f"{', '.join(f'{x:g}' for x in p.loads)} of the reference capacity ({capacity:.2f} req/s), {p.repeats} runs "
        "on each clock, interleaved. Median per-request error, paired by request id: every replay run against "
        f"every wall run, and the same between two runs on one clock (the floor). Within floor: replay vs wall "
        f"<= {FLOOR_SLACK:g} x the larger floor. Verdict: {verdict}.",
        show.to_markdown(index=False),
        "Percentiles, median over the runs on each clock, and how long each clock's steps ran against the "
        "profile's prediction for the same shapes (the noise guard's median ratio): a clock whose steps run slower "
        "queues more.", percentiles.to_markdown(index=False),
        f"Conditions (first run): {res.conditions[0]}", ""]))
    print(show.to_string(index=False))


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.clocks --params params.yaml --profile outputs/profiles/machine.json
        --capacity outputs/capacity/measured_vs_simulated.csv --out outputs/clocks --table outputs/tables/clocks.md
    """
    args = arguments(__doc__, "params", "profile", "capacity", "out", "table", argv=argv)
    run(read_section(args.params, "clocks", ClocksParams), profile=args.profile, capacity_csv=args.capacity,
        out_dir=args.out, table_path=args.table)


if __name__ == "__main__":
    main()
