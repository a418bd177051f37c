"""REPORT.md's section on colocation against prefill/decode disaggregation (stage sim_disagg, SIMULATED):
what was compared, the verdicts on the published statements, the numbers that drive them, the maps.
Every sentence is computed from outputs/simulated/disagg/ (and cost_models/presets.csv for provenance)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from chunklab.report.disagg import SCORE, verdicts

FOLDER = ("simulated", "disagg")
SENSITIVITY = ("simulated", "sensitivity")  # stage sim_sensitivity: the grid again, assumed constants scaled


def load(outputs: Path, folder: tuple[str, ...] = FOLDER) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict] | None:
    base = outputs.joinpath(*folder)
    if not (base / "winners.csv").is_file():
        return None
    return (pd.read_csv(base / "winners.csv"), pd.read_csv(base / "cells.csv"), pd.read_csv(base / "capacity.csv"),
            json.loads((base / "conditions.json").read_text()))


def decided(winners: pd.DataFrame, cells: pd.DataFrame, capacity: pd.DataFrame, c: dict) -> pd.Series:
    """Each statement's verdict on these tables, by the main grid's rules and margin (key -> verdict)."""
    v = verdicts(winners, cells, capacity, c["tie_margin"], c["verdict_loads"], c["throughput_load"])
    return v.set_index("key")["verdict"]


def sensitivity(outputs: Path, c: dict) -> tuple[pd.DataFrame, dict] | None:
    """Per statement (rows, keyed as STATEMENTS), its verdict on the main grid's points at the GPU counts
    stage sim_sensitivity ran (column 'x1') and at each of its settings; None where it did not run."""
    root = outputs.joinpath(*SENSITIVITY)
    if not (root / "settings.json").is_file():
        return None
    s = json.loads((root / "settings.json").read_text())
    winners, cells, capacity, _ = load(outputs)
    columns = {"x1": decided(winners[winners["gpus"].isin(s["gpus"])], cells[cells["gpus"].isin(s["gpus"])],
                             capacity, c)}
    for name in s["settings"]:
        loaded = load(outputs, SENSITIVITY + (name,))
        if loaded is None:
            raise SystemExit(f"report: {root / name} has no winners.csv: rerun `dvc repro sim_sensitivity`")
        columns[name] = decided(*loaded[:3], c)
    return pd.DataFrame(columns), s


def moved(table: pd.DataFrame) -> dict[str, list[str]]:
    """statement key -> the settings under which its verdict differs from column 'x1'."""
    return {key: [name for name in table.columns[1:] if row[name] != row["x1"]] for key, row in table.iterrows()}


def sensitivity_lines(outputs: Path, c: dict, statements: pd.DataFrame) -> list[str]:
    found = sensitivity(outputs, c)
    if found is None:
        return []
    table, s = found
    moves = moved(table)
    values = "; ".join(f"{name}: " + ", ".join(f"{pair} " + ", ".join(f"{k} {v:g}" for k, v in vals.items())
                                              for pair, vals in setting["values"].items())
                       for name, setting in s["settings"].items())
    by_key = statements.set_index("key")
    shown = table.rename(columns={"x1": "as assumed"}).assign(
        statement=by_key.loc[table.index, "statement"]).reset_index(drop=True)
    shown = shown[["statement", *[col for col in shown.columns if col != "statement"]]]

    def named(k: str) -> str:
        return f"{by_key.loc[k, 'source']} ({by_key.loc[k, 'statement']})"
    moving = [f"{named(k)}: {table.loc[k, 'x1']} as assumed, " + ", ".join(f"{table.loc[k, n]} at {n}" for n in names)
              for k, names in moves.items() if names]
    differ = [f"{named(k)}: {by_key.loc[k, 'verdict']} on every GPU count, {table.loc[k, 'x1']} on these"
              for k in table.index if by_key.loc[k, "verdict"] != table.loc[k, "x1"]]
    return [f"Sensitivity (SIMULATED, stage sim_sensitivity): the GPU presets' assumed constants, scaled one at a "
            f"time, on the grid's {', '.join(map(str, s['gpus']))}-GPU points, each verdict by the rules above "
            f"(its column 'as assumed': the same points of the main grid). Each setting searches its own "
            f"single-GPU capacity, so its loads are of that capacity and its rates differ from the main grid's. "
            f"'within margin' also stands for a statement the grid cannot decide (DistServe's 7.4x, past what "
            f"the loads span): a verdict that stays there is not shown robust. Settings: {values}.",
            shown.to_markdown(index=False),
            ("Verdicts that move within these factors: " + "; ".join(moving) + "." if moving else
             "No verdict moves within these factors."),
            *([f"On these GPU counts alone some verdicts differ from the table above: {'; '.join(differ)}."]
              if differ else [])]


def table_of(c: dict, capacity: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """What was compared, in the conditions' own numbers."""
    seconds = "; ".join(f"{pair}: " + ", ".join(f"{name.removeprefix('disagg_')} TTFT {s['ttft_s']:g} s / TPOT "
                                                 f"{s['tpot_s']:g} s" for name, s in sets.items())
                        for pair, sets in c["slo_seconds"].items())
    links = ", ".join(f"{name} ({link['bandwidth_gb_per_s']:g} GB/s, {link['latency_s'] * 1e6:g} us a transfer)"
                      for name, link in c["link_presets"].items())
    caps = "; ".join(f"{r.model} on {r.hardware}, {r.workload}: {r.capacity_req_per_s:.2f} req/s"
                     for r in capacity.itertuples())
    fixed = cells["setting"].str.startswith("budget ") | (cells["topology"] != "colocated")
    # a fixed run is judged under every SLO set (one row each); a policy's run under its own set only
    runs = len(cells[fixed].drop_duplicates(["model", "hardware", "gpus", "workload", "load", "link", "topology",
                                             "prefill", "budget"])) + int((~fixed).sum())
    return [f"SIMULATED: the roofline cost model of each device preset, not a GPU. On N = "
            f"{', '.join(map(str, c['gpus']))} GPUs, N colocated replicas (chunked, budget tuned per point over "
            f"{c['budgets']}{' and ' + ', '.join(c['colocated_policies']) + ' (a run per SLO set, its gap target)' if c.get('colocated_policies') else ''}, router {c['router']}) against every xP/yD split with x + y = N (prefill budget "
            f"{c['prefill_budget']}: whole prompts), each split over each link: {links}. Workloads: "
            f"{', '.join(c['workloads'])}; requests per run on N GPUs: "
            f"{', '.join(f'{n}: {k}' for n, k in c['requests_per_run'].items())} (the same per GPU; the trace: its first rows, "
            f"compressed to the rate), seed {c['seed']}; {runs} runs, each judged against every SLO set (a budget policy's against its own).",
            f"SLO sets (per request, TTFT and mean TPOT; chosen to span the regimes TaiChi names, the seconds "
            f"ours, scaled per pair to its decode step; conf/slo/disagg_*.yaml): {seconds}.",
            f"Load: the offered rate over N x one GPU's capacity (the default scheduler, budget 512, >= "
            f"{c['target']:.0%} of requests within {c['capacity_slo']}); loads {c['loads']}. One GPU's capacity: "
            f"{caps}. Goodput per GPU: the offered rate x the share of requests within the SLO set, over N (the "
            "same rate for every topology of a point). A lead under "
            f"{c['tie_margin']:.0%} is a tie: the simulation is exact for its cost model, so this is a modelling "
            "margin (how far the cost model may be from the device), not noise."]


def provenance(outputs: Path, hardware: list[str]) -> str:
    """Which of the presets used are fit on their own device and which borrow another's efficiencies."""
    path = outputs / "cost_models" / "presets.csv"
    if not path.is_file():
        return ""
    presets = pd.read_csv(path, keep_default_na=False).set_index("hardware")
    parts = [f"{h} ({'fit on its own device' if presets.loc[h, 'efficiencies_fit_on'] == h else 'efficiencies borrowed from ' + presets.loc[h, 'efficiencies_fit_on']})"
             for h in hardware if h in presets.index]
    borrowed = [h for h in presets.index if presets.loc[h, "efficiencies_fit_on"] not in (h, "")]
    unused = [h for h in borrowed if h not in hardware]
    return ("Presets used: " + ", ".join(parts) + "." + (f" Not used here: {', '.join(unused)} (borrowed)." if unused else ""))


def drivers(winners: pd.DataFrame, cells: pd.DataFrame, c: dict) -> list[str]:
    """Why the regimes come out as they do: the transfer against the TTFT target, the colocated decode's
    interference against the TPOT target, the links, and the points below capacity."""
    hot = winners[winners["load"].isin(c["verdict_loads"])]
    out = []
    for load, w in winners[~winners["load"].isin(c["verdict_loads"])].groupby("load"):
        out.append(f"- At load {load:g} (not read by the regime verdicts): ties {int((w['winner'] == 'tie').sum())}, "
                   f"neither serves any {int((w['winner'] == 'none').sum())} of {len(w)} points; median share within "
                   f"SLO colocated {w['colocated_share_in_slo'].median():.0%}, split "
                   f"{w['disagg_share_in_slo'].median():.0%}.")
    for (model, hardware, slo), g in hot.groupby(["model", "hardware", "slo"], sort=False):
        ttft, tpot = float(g["slo_ttft_s"].iloc[0]), float(g["slo_tpot_s"].iloc[0])
        w = g[g["winner"].isin(["colocated", "disaggregated"])]  # the points a side wins: what decided them
        head = f"- {model} on {hardware}, {slo} (TTFT {ttft:g} s, TPOT {tpot * 1e3:g} ms): "
        if w.empty:
            out.append(head + f"every one of its {len(g)} points is a tie or serves none.")
            continue
        out.append(
            head + f"at the {len(w)} of {len(g)} points a side wins ({int((w['winner'] == 'colocated').sum())} "
            f"colocated), median TTFT p99 colocated {w['colocated_ttft_p99_s'].median():.3f} s against the best "
            f"split's {w['disagg_ttft_p99_s'].median():.3f} s (its prefill queue p50 "
            f"{w['disagg_prefill_queue_p50_s'].median():.3f} s, KV transfer p99 {w['disagg_transfer_p99_s'].median() * 1e3:.1f} ms); "
            f"median TPOT p50 colocated {w['colocated_tpot_p50_s'].median() * 1e3:.1f} ms against the split's "
            f"{w['disagg_tpot_p50_s'].median() * 1e3:.1f} ms (decode steps beside prefill chunks against decode alone); "
            f"share within SLO {w['colocated_share_in_slo'].median():.0%} colocated, {w['disagg_share_in_slo'].median():.0%} split.")
    split = cells[(cells["topology"] == "disaggregated") & cells["load"].isin(c["verdict_loads"])]
    for link, g in split.groupby("link", sort=False):
        ratio = (g["transfer_p99_s"] / g["slo_ttft_s"]).max()
        wait = g["kv_wait_p99_s"] if "kv_wait_p99_s" in g else pd.Series([0.0])
        preset = c.get("link_presets", {}).get(link, {})
        published = preset.get("published_gb_per_s")
        slower = (f" At the lowest rate reported for this link, {published:g} GB/s against the preset's "
                  f"{preset['bandwidth_gb_per_s']:g} ({preset['published_source'].split(':')[0]}), that p99 scaled "
                  f"linearly is {ratio * preset['bandwidth_gb_per_s'] / published:.1%} of the TTFT target (an estimate: "
                  "a slower link also shares its ports more)." if published else "")
        out.append(f"- KV over {link}: transfer p50 {g['transfer_p50_s'].median() * 1e3:.2f} ms, p99 at most "
                   f"{g['transfer_p99_s'].max() * 1e3:.1f} ms (sharing the link's ports with the transfers in flight), "
                   f"at most {ratio:.1%} of the TTFT target of its run; the wait for blocks on the decode side before "
                   f"a transfer starts, p99 at most {wait.max() * 1e3:.1f} ms.{slower}")
    if len(c["links"]) > 1:
        per = winners.pivot_table(index=["model", "hardware", "gpus", "workload", "slo", "load"], columns="link",
                                  values="winner", aggfunc="first")
        flips = int((per.nunique(axis=1) > 1).sum())
        out.append(f"- The link changes the winner at {flips} of {len(per)} points ({' against '.join(c['links'])}).")
    return out


def disagg_section(outputs: Path) -> list[str]:
    loaded = load(outputs)
    if loaded is None:
        return []
    winners, cells, capacity, c = loaded
    v = verdicts(winners, cells, capacity, c["tie_margin"], c["verdict_loads"], c["throughput_load"])
    table = v[["source", "statement", "verdict", "decided_by"]].rename(columns={"decided_by": "decided by (SIMULATED)"})
    hardware = list(dict.fromkeys(winners["hardware"]))
    maps = [f"![{m} on {h}, {link}](plots/simulated/disagg_{m}_{h}_{link}.png)"
            for (m, h, link) in winners[["model", "hardware", "link"]].drop_duplicates().itertuples(index=False)]
    agree = v[v["verdict"] == "agrees"]["source"].tolist()
    other = v[v["verdict"] != "agrees"]
    return ["## Colocation or prefill/decode disaggregation at production scale (SIMULATED)",
            *table_of(c, capacity, cells), provenance(outputs, hardware),
            "Verdicts on the published statements, decided by the tables (rules: src/chunklab/report/disagg.py):",
            table.to_markdown(index=False),
            f"Ours agree with {len(agree)} of {len(v)} statements; "
            + ("; ".join(f"{r.source} ({r.statement}): {r.verdict}" for r in other.itertuples()) or "none differ")
            + ". What drives them:", *drivers(winners, cells, c),
            *sensitivity_lines(outputs, c, v),
            "These are one cost model's predictions for a plausible device (transfers share each instance's link "
            "port evenly, a transfer starts once the decode side has blocks for its KV; models that fit one GPU, no "
            "tensor parallelism), not measurements of a GPU cluster.",
            *maps]


def disagg_metrics(outputs: Path) -> dict[str, dict]:
    """Each verdict as 1 (agrees), 0 (within margin) or -1 (disagrees), for `dvc metrics show`:
    disagg.<statement key> (report/disagg.py: STATEMENTS)."""
    loaded = load(outputs)
    if loaded is None:
        return {}
    winners, cells, capacity, c = loaded
    return {"disagg": {r.key: SCORE[r.verdict]
                       for r in verdicts(winners, cells, capacity, c["tie_margin"], c["verdict_loads"],
                                         c["throughput_load"]).itertuples()}}
