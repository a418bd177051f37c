"""REPORT findings of the cluster stage (outputs/cluster/): which arm wins at each load on this
machine's two cores (measured, median over repeats), whether the simulated twins pick the same, and
how far the twins are from the measured runs per request, beside the repeat-vs-repeat floor."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

WIN_METRIC = "goodput_req_per_s"
ARM_NAMES = {"single": "one engine on both cores", "replicas": "2 replicas (a core each)",
             "pd": "1 prefill + 1 decode (a core each, KV through shared memory)"}


def cluster_findings(outputs: Path) -> list[str]:
    folder = outputs / "cluster"
    if not (folder / "winners.csv").is_file():
        return ["The cluster stage has not run in this repro (`dvc repro cluster`): no measured cluster to report."]
    wins = pd.read_csv(folder / "winners.csv")
    paired = pd.read_csv(folder / "paired.csv")
    out = []
    for load, g in wins[wins["executor"] == "measured"].groupby("load"):
        best = g[g["wins"]].iloc[0]
        others = g[~g["wins"]].sort_values(WIN_METRIC, ascending=False)
        sim = wins[(wins["executor"] == "simulated") & (wins["load"] == load) & wins["wins"]]
        sim_arm = sim["arm"].iloc[0] if len(sim) else ""
        agree = "the simulated twins agree" if sim_arm == best["arm"] else \
            f"the simulated twins pick {ARM_NAMES.get(sim_arm, sim_arm or 'none')} instead"
        out.append(f"- At load {load:g} of the measured capacity, **{ARM_NAMES.get(best['arm'], best['arm'])}** wins "
                   f"(MEASURED goodput {best[WIN_METRIC]:.2f} req/s, TTFT p50 {1e3 * best['ttft_p50_s']:.0f} ms; "
                   + "; ".join(f"{ARM_NAMES.get(r.arm, r.arm)} {getattr(r, WIN_METRIC):.2f} req/s, "
                               f"{1e3 * r.ttft_p50_s:.0f} ms" for r in others.itertuples())
                   + f"); {agree}.")
    for metric, g in paired.groupby("metric", sort=False):
        over = (g["median_rel_error"] > g["median_rel_error_floor"]).sum()
        out.append(f"- Paired {metric.upper()} error of the simulated twins: median {g['median_rel_error'].min():.0%}-"
                   f"{g['median_rel_error'].max():.0%} over the points, against a repeat-vs-repeat floor of "
                   f"{g['median_rel_error_floor'].min():.0%}-{g['median_rel_error_floor'].max():.0%}; "
                   f"{over} of {len(g)} points above their floor.")
    return out
