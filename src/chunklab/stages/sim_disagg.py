"""Stage sim_disagg (SIMULATED): issue 52's question at production scale: on N GPUs, do N colocated
chunked replicas or a prefill pool of x GPUs and a decode pool of y = N - x serve more requests within
an SLO set, per GPU?

Per model/device pair (roofline cost model of its preset) and workload: the single-GPU capacity (the
default scheduler, budget 512: the highest rate with >= target of requests within capacity_slo); then,
for each N and load, the offered rate is load x N x that capacity, and every topology serves the same
requests: colocated (N replicas at each of `budgets`; the best counts, so the budget is tuned per
point) and every xP/yD split over each link. One run per topology is judged against every SLO set.
Goodput per GPU: the offered rate x the share of requests within the SLO set, over N (the rate is the
same for every topology of a point, so a short run's drain never decides); completed per GPU: finished
requests over the run's makespan, over N (the throughput, where the load saturates every topology).

Writes out_dir: capacity.csv, cells.csv (tidy: one row per run and SLO set), winners.csv (per point:
the best colocated against the best split), metrics.json, conditions.json (the grid, SLO seconds, links).
"""
from __future__ import annotations

import dataclasses
import itertools
from functools import partial
from pathlib import Path

import pandas as pd

from chunklab.config import LinkConfig, RunConfig, SloConfig
from chunklab.experiments.capacity import at_rate, natural_rate, search
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.load import reference_config
from chunklab.experiments.simulate import judged_under, simulate, simulate_many
from chunklab.experiments.slo import with_gap_target
from chunklab.model.sizes import kv_bytes_per_token, num_parameters
from chunklab.stages.common import arguments, read_section, write_json
from chunklab.stages.shared_params import SimDisaggParams


MIN_COLOCATED_SHARE = 0.1  # a gain is read only where colocation still serves this share within SLO:
# below it the ratio divides by a handful of requests, and overload, not topology, decides it
POINT = ["model", "hardware", "gpus", "workload", "slo", "load", "link"]
DRIVERS = ["ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "kv_wait_p99_s", "transfer_p50_s", "transfer_p99_s",
           "prefill_queue_p50_s", "decode_queue_p50_s", "preemptions"]  # kv_wait: for blocks on the decode side
COLOCATED, DISAGG, TIE, NONE = "colocated", "disaggregated", "tie", "none"


def scaled(slo: SloConfig, scale: float) -> SloConfig:
    """The SLO's seconds times scale (its absolute bounds: the disagg SLOs give no multiples)."""
    return dataclasses.replace(slo, **{k: None if v is None else v * scale for k, v in
                                       (("ttft_s", slo.ttft_s), ("tpot_s", slo.tpot_s), ("itl_p99_s", slo.itl_p99_s))})


def slo_sets(p: SimDisaggParams, model: str, hardware: str, scale: float) -> dict[str, SloConfig]:
    return {name: scaled(compose_run_config(["engine=simulated", "tracking=none", f"model={model}", f"hardware={hardware}",
                                             f"slo={name}"]).slo, scale)
            for name in p.slos}


def requests_per_run(p: SimDisaggParams, gpus: int) -> int:
    """Requests of a run on `gpus` GPUs: num_requests at the smallest N, scaled with N, so every N serves
    as many requests per GPU (a fixed count would make the runs on 8 GPUs too short to queue)."""
    return p.num_requests * gpus // min(p.gpus)


def base_config(model: str, hardware: str, workload: str, p: SimDisaggParams, topology: tuple[str, ...],
                num_requests: int, pair_overrides: tuple[str, ...] = ()) -> RunConfig:
    return compose_run_config(["engine=simulated", "tracking=none", f"model={model}", f"hardware={hardware}",
                               f"workload={workload}", f"workload.num_requests={num_requests}",
                               f"workload.seed={p.seed}", f"router={p.router}", *topology, *p.overrides,
                               *pair_overrides])


def single_capacity(job: tuple[RunConfig, SimDisaggParams]) -> dict:
    """One pair and workload's single-GPU capacity (a pool task: its probes run one at a time)."""
    base, p = job
    found = search(reference_config(base), [p.seed], p.target, p.capacity_rel_tol, processes=1)
    return {"capacity_req_per_s": found.rate_req_per_s, "hi_req_per_s": found.hi_req_per_s,
            "num_probes": len(found.probes)}


def judged(job: tuple[RunConfig, dict[str, SloConfig]]) -> dict[str, float]:
    """One run judged against its pair's SLO sets (judged_under), on one argument, as the pool passes its
    tasks (simulate_many's Pool.map), and at module level, so the pool can pickle it."""
    cfg, slos = job
    return simulate(cfg, partial(judged_under, slos=slos))


def topologies(p: SimDisaggParams, n: int) -> list[dict]:
    """Every topology on n GPUs: n colocated replicas at each budget and under each budget policy (one per
    SLO set, its target: policy_slo), every xP/yD split over each link. setting: how the colocated budget is
    set ("budget 512", or the policy's name)."""
    fixed = {"policy": "fixed", "policy_slo": ""}
    out = [{"topology": COLOCATED, "link": "none", "prefill": 0, "decode": 0, "budget": b, "setting": f"budget {b}"}
           | fixed for b in p.budgets]
    out += [{"topology": COLOCATED, "link": "none", "prefill": 0, "decode": 0, "budget": p.prefill_budget,
             "setting": policy, "policy": policy, "policy_slo": slo} for policy in p.colocated_policies for slo in p.slos]
    return out + [{"topology": DISAGG, "link": link, "prefill": x, "decode": n - x, "budget": p.prefill_budget,
                   "setting": f"{x}P{n - x}D"} | fixed for link in p.links for x in range(1, n)]


def configure(colocated: RunConfig, split: dict[str, RunConfig], n: int, t: dict,
              slo_set: dict[str, SloConfig] | None = None) -> RunConfig:
    """The run of topology t on n GPUs; slo_set: the pair's SLO sets, for a budget policy's gap target."""
    if t["topology"] == COLOCATED:
        cfg = colocated
        cfg = dataclasses.replace(cfg, topology=dataclasses.replace(cfg.topology, replicas=n))
        scheduler = dataclasses.replace(cfg.scheduler, budget=t["budget"], budget_policy=t["policy"], gap_target_s=None,
                                        gap_target_kind=None)
        if t["policy_slo"]:
            scheduler = with_gap_target(scheduler, slo_set[t["policy_slo"]])
        return dataclasses.replace(cfg, scheduler=scheduler)
    cfg = split[t["link"]]
    return dataclasses.replace(cfg, topology=dataclasses.replace(
        cfg.topology, prefill=t["prefill"], decode=t["decode"], prefill_budget=t["budget"]))


def run(p: SimDisaggParams, out_dir: Path, pair_overrides: dict[tuple[str, str], tuple[str, ...]] | None = None) -> None:
    """pair_overrides: Hydra overrides of one (model, hardware) pair's every run (stage sim_sensitivity
    scales a preset's assumed constants this way)."""
    extra = pair_overrides or {}
    if p.capacity_slo not in p.slos:
        raise SystemExit(f"sim_disagg.capacity_slo={p.capacity_slo}: must be one of sim_disagg.slos {p.slos}")
    if p.throughput_load not in p.loads or not set(p.verdict_loads) <= set(p.loads):
        raise SystemExit(f"sim_disagg: throughput_load={p.throughput_load} and verdict_loads={p.verdict_loads} "
                         f"must be among loads {p.loads}")
    out_dir.mkdir(parents=True, exist_ok=True)
    cases = list(itertools.product(p.pairs, p.workloads))
    bases = {(m, h, w): base_config(m, h, w, p, ("topology=replicas",), p.num_requests, extra.get((m, h), ()))
             for (m, h, _), w in cases}
    slos = {(m, h): slo_sets(p, m, h, scale) for m, h, scale in p.pairs}
    jobs = [(dataclasses.replace(configure(bases[m, h, w], {}, 1, topologies(p, 1)[0]), slo=slos[m, h][p.capacity_slo]),
             p) for (m, h, _), w in cases]
    caps = simulate_many(jobs, p.processes, fn=single_capacity, label="sim_disagg capacity searches")
    capacity = pd.DataFrame([{"model": m, "hardware": h, "workload": w,
                              "model_params_b": num_parameters(bases[m, h, w].model) / 1e9,
                              "kv_bytes_per_token": kv_bytes_per_token(bases[m, h, w].model)} | c
                             for ((m, h, _), w), c in zip(cases, caps)])
    for r in capacity.itertuples():
        if r.capacity_req_per_s <= 0:
            raise SystemExit(f"sim_disagg: {r.model} on {r.hardware} serves no rate of {r.workload} within "
                             f"slo={p.capacity_slo}: an SLO it cannot meet on one GPU")
    keys, cfgs = [], []
    for ((m, h, _), w), cap in zip(cases, caps):
        for n in p.gpus:
            count = requests_per_run(p, n)
            colocated = base_config(m, h, w, p, ("topology=replicas",), count, extra.get((m, h), ()))
            split = {link: base_config(m, h, w, p, ("topology=disaggregated", f"link={link}"), count,
                                       extra.get((m, h), ()))
                     for link in p.links}
            trace_rate = natural_rate(colocated.workload, colocated.model) if colocated.workload.kind == "trace" else None
            for load in p.loads:
                rate = load * n * cap["capacity_req_per_s"]
                for t in topologies(p, n):
                    keys.append({"model": m, "hardware": h, "gpus": n, "workload": w, "load": load,
                                 "rate_per_s": rate} | t)
                    cfgs.append(at_rate(configure(colocated, split, n, t, slos[m, h]), rate, p.seed, trace_rate))
    summaries = simulate_many([(c, slos[k["model"], k["hardware"]]) for k, c in zip(keys, cfgs)], p.processes,
                              fn=judged, label="sim_disagg")
    cells = tidy(keys, summaries, slos)
    winners = winners_table(cells, p.tie_margin)
    capacity.to_csv(out_dir / "capacity.csv", index=False, float_format="%.6g")
    cells.to_csv(out_dir / "cells.csv", index=False, float_format="%.6g")
    winners.to_csv(out_dir / "winners.csv", index=False, float_format="%.6g")
    write_json(out_dir / "metrics.json", stage_metrics(winners, len(cfgs)))
    write_json(out_dir / "conditions.json", conditions(p, slos, {name: cfg.link for name, cfg in split.items()}))
    print(f"[sim_disagg] {len(cfgs)} runs, {len(winners)} points: " + ", ".join(
        f"{k} {v}" for k, v in winners["winner"].value_counts().sort_index().items()), flush=True)


def conditions(p: SimDisaggParams, slos: dict[tuple[str, str], dict[str, SloConfig]],
               links: dict[str, LinkConfig]) -> dict:
    """What the report needs to say what was compared: the grid, each pair's SLO seconds, each link."""
    return dataclasses.asdict(p) | {
        "min_colocated_share": MIN_COLOCATED_SHARE,
        "requests_per_run": {str(n): requests_per_run(p, n) for n in p.gpus},
        "slo_seconds": {f"{m} on {h}": {name: dataclasses.asdict(s) for name, s in sets.items()}
                        for (m, h), sets in slos.items()},
        "link_presets": {name: dataclasses.asdict(link) for name, link in links.items()}}


def tidy(keys: list[dict], summaries: list[dict], slos: dict[tuple[str, str], dict[str, SloConfig]]) -> pd.DataFrame:
    """One row per run and SLO set: goodput per GPU, the share in SLO, and the numbers that drive them."""
    rows = []
    for k, s in zip(keys, summaries):
        for slo, target in slos[k["model"], k["hardware"]].items():
            if k["policy_slo"] not in ("", slo):  # a policy run aimed at another SLO set's gap
                continue
            rows.append(k | {"slo": slo, "slo_ttft_s": target.ttft_s, "slo_tpot_s": target.tpot_s,
                             "goodput_per_gpu_rps": s[f"slo_attainment@{slo}"] * k["rate_per_s"] / k["gpus"],
                             "share_in_slo": s[f"slo_attainment@{slo}"],
                             "completed_per_gpu_rps": s["requests_per_s"] / k["gpus"]}
                        | {d: s.get(d, 0.0 if d.startswith(("kv_wait", "transfer", "decode_queue")) else None) for d in DRIVERS})
    cols = ["model", "hardware", "gpus", "workload", "slo", "slo_ttft_s", "slo_tpot_s", "load", "rate_per_s", "link", "topology", "prefill",
            "decode", "budget", "setting", "goodput_per_gpu_rps", "share_in_slo", "completed_per_gpu_rps", *DRIVERS]
    return pd.DataFrame(rows)[cols]


def winners_table(cells: pd.DataFrame, tie_margin: float) -> pd.DataFrame:
    """Per point (model, hardware, gpus, workload, slo, load, link): the best colocated run (over its budgets)
    against the best split over that link; winner colocated / disaggregated, a tie when the better is
    ahead by less than tie_margin of the other, none when neither serves a request within the SLO."""
    colo = cells[cells["topology"] == COLOCATED].drop(columns="link")
    rows = []
    for key, d in cells[cells["topology"] == DISAGG].groupby(POINT, sort=False):
        point = dict(zip(POINT, key))
        c = colo[(colo[POINT[:-1]] == pd.Series(point)[POINT[:-1]]).all(axis=1)]
        bc, bd = best(c), best(d)
        g_c, g_d = bc["goodput_per_gpu_rps"], bd["goodput_per_gpu_rps"]
        ratio = g_d / g_c if g_c > 0 else (float("inf") if g_d > 0 else float("nan"))
        lead = max(g_c, g_d) / min(g_c, g_d) - 1 if min(g_c, g_d) > 0 else float("inf")
        winner = NONE if max(g_c, g_d) == 0 else TIE if lead < tie_margin else COLOCATED if g_c > g_d else DISAGG
        rows.append(point | {
            "slo_ttft_s": bc["slo_ttft_s"], "slo_tpot_s": bc["slo_tpot_s"], "rate_per_s": bc["rate_per_s"],
            "winner": winner, "margin": lead, "disagg_over_colocated": ratio,
            "colocated_budget": int(bc["budget"]), "colocated_setting": bc["setting"], "colocated_goodput_per_gpu_rps": g_c,
            "colocated_share_in_slo": bc["share_in_slo"], "split": f"{int(bd['prefill'])}P{int(bd['decode'])}D",
            "disagg_goodput_per_gpu_rps": g_d, "disagg_share_in_slo": bd["share_in_slo"]}
            | {f"colocated_{k}": bc[k] for k in ("ttft_p99_s", "tpot_p50_s", "tpot_p99_s")}
            | {f"disagg_{k}": bd[k] for k in ("ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                                               "kv_wait_p99_s", "transfer_p50_s", "transfer_p99_s", "prefill_queue_p50_s",
                                               "decode_queue_p50_s")})
    return pd.DataFrame(rows)


def best(runs: pd.DataFrame) -> pd.Series:
    """The run with the highest goodput; ties to the higher share in SLO, then the first listed."""
    return runs.sort_values(["goodput_per_gpu_rps", "share_in_slo"], ascending=False, kind="stable").iloc[0]


def stage_metrics(winners: pd.DataFrame, num_runs: int) -> dict[str, float]:
    """For `dvc metrics show` (SIMULATED): per SLO set, the share of points each side wins; the largest
    gain of disaggregation over colocation, per GPU, where colocation serves MIN_COLOCATED_SHARE in SLO."""
    # dvc metrics show: sim_disagg.runs, sim_disagg.won.<slo>.<side> (share of points),
    # sim_disagg.largest_gain (disaggregated over colocated goodput per GPU, colocated >= MIN_COLOCATED_SHARE in SLO)
    out: dict = {"runs": num_runs, "points": len(winners), "won": {}}
    for slo, w in winners.groupby("slo", sort=False):
        out["won"][slo] = {side: round(float((w["winner"] == side).mean()), 4) for side in (COLOCATED, DISAGG, TIE, NONE)}
    served = winners[winners["colocated_share_in_slo"] >= MIN_COLOCATED_SHARE]
    finite = served["disagg_over_colocated"].replace(float("inf"), float("nan")).dropna()
    out["largest_gain"] = round(float(finite.max()), 4) if len(finite) else 0.0
    return {"sim_disagg": out}


def main(argv: list[str] | None = None) -> None:
    """The stage's dvc.yaml cmd:

        python -m chunklab.stages.sim_disagg --params params.yaml --out outputs/simulated/disagg
    """
    args = arguments(__doc__, "params", "out", argv=argv)
    run(read_section(args.params, "sim_disagg", SimDisaggParams), out_dir=args.out)


if __name__ == "__main__":
    main()
