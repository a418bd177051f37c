"""REPORT findings at production scale (stage sim_production) and the cost model behind them
(stage cost_models): the answer to the chapter's closing claim, with its provenance and error."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def cost_model_provenance(outputs: Path) -> list[str]:
    """The cost model's line: which presets are fit on their own device's operator times and which borrow
    another's (outputs/cost_models/presets.csv, from the presets' numbers), and each fit's held-out error."""
    folder = outputs / "cost_models"
    fits = {f["hardware"]: f for f in (json.loads(p.read_text()) for p in sorted(folder.glob("*_fit.json")))
            if "held_out_error" in f}
    presets = pd.read_csv(folder / "presets.csv", keep_default_na=False)
    own = presets[presets["efficiencies_fit_on"] == presets["hardware"]]
    borrowed = presets[(presets["efficiencies_fit_on"] != presets["hardware"]) & (presets["efficiencies_fit_on"] != "")]
    unfit = presets[presets["efficiencies_fit_on"] == ""]
    scored = []
    for hw in own["hardware"]:
        err = fits[hw]["held_out_error"]
        gemms = [op for op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj") if op in err]
        worst = max(gemms, key=lambda op: err[op]["median_rel_error"])
        scored.append(f"{hw}: a whole layer off by a median {err['layer (sum)']['median_rel_error']:.1%} (p90 "
                      f"{err['layer (sum)']['p90_rel_error']:.1%}), the worst GEMM ({worst}) by "
                      f"{err[worst]['median_rel_error']:.1%}")
    line = ("- Cost model: the roofline of each preset's spec sheet (cost_models/roofline.py). Fit on their own "
            f"device: {', '.join(own['hardware']) or 'none'}: the GEMM and elementwise terms of each are fit on Vidur's "
            "measured Llama-2-7B operator times on that device; on held-out token counts " + "; ".join(scored) + ".")
    if len(borrowed):
        line += (" Borrowed: " + ", ".join(f"{r.hardware} (the {r.efficiencies_fit_on} fit's)" for r in borrowed.itertuples())
                 + ": no operator times of that device are in the repository, so its efficiencies are unverified on it.")
    if len(unfit):
        line += " Not fit: " + ", ".join(unfit["hardware"]) + " (the preset's own figures)."
    steps = folder / "decode_steps.csv"
    if steps.is_file():
        d = pd.read_csv(steps).set_index(["data", "efficiencies_fit_on"])
        cross = [(data, fit) for data, fit in d.index if data != fit and (data, data) in d.index]
        if cross:
            line += (f" What borrowing would cost on decode-sized steps (at most {d['max_tokens'].iloc[0]} tokens, a "
                     "whole layer, predicted over measured less one): " + "; ".join(
                         f"{data}'s operator times priced with the {fit} fit {d.loc[(data, fit), 'median_rel_error']:+.1%}"
                         f" (median), with its own {d.loc[(data, data), 'median_rel_error']:+.1%}" for data, fit in cross) + ".")
    return [line + " Attention and the per-step overhead rest on published kernel efficiencies and assumptions, not "
            "on measurements (conf/hardware/*.yaml cite each): read the figures below as the scheduler's behaviour on "
            "a plausible device, not as a GPU benchmark."]


def production_metrics(outputs: Path, load: float = 1.0) -> dict[str, dict]:
    """The chapter's question at production scale for `dvc metrics show` (SIMULATED), at load 1.0 of each
    point's capacity: production.<model>_<gpu>.<workload>.best_budget and .gain_vs_unchunked (the best
    budget's goodput over the unchunked budget's)."""
    path = outputs / "simulated" / "production" / "chunking_gain.csv"
    if not path.is_file():
        return {}
    gain = pd.read_csv(path)
    out: dict[str, dict] = {}
    for r in gain[gain["load"] == load].itertuples():
        out.setdefault(f"{r.model}_{r.hardware}", {})[r.workload] = {
            "best_budget": int(r.best_budget), "gain_vs_unchunked": round(float(r.gain_vs_unchunked), 4)}
    return {"production": out} if out else {}


def production_findings(outputs: Path) -> list[str]:
    base = outputs / "simulated" / "production"
    if not (base / "chunking_gain.csv").is_file():
        return []
    gain = pd.read_csv(base / "chunking_gain.csv")
    cells = pd.read_csv(base / "cells.csv")
    pub = pd.read_csv(base / "published.csv")
    out = cost_model_provenance(outputs)
    for (model, hardware, workload), g in gain.groupby(["model", "hardware", "workload"], sort=False):
        loads = ", ".join(f"{r.load:g}: budget {r.best_budget} ({r.gain_vs_unchunked:.2f}x)" for r in g.itertuples())
        c = cells[(cells["model"] == model) & (cells["hardware"] == hardware) & (cells["workload"] == workload)]
        whole = c[c["budget"] == c["budget"].max()]
        small = c[c["budget"] == c["budget"].min()]
        out.append(f"- {model} on {hardware}, `{workload}`: best budget by load, and its goodput over the "
                   f"unchunked budget's: {loads}. Worst stall unchunked {whole['worst_stall_s'].max() * 1e3:.0f} ms, "
                   f"at budget {int(small['budget'].iloc[0])} {small['worst_stall_s'].max() * 1e3:.0f} ms; steps "
                   f"carrying a prefill: {c['prefill_step_share'].min():.0%}-{c['prefill_step_share'].max():.0%}.")
    wins = gain[gain["gain_vs_unchunked"] > 1.05]
    regime = cells[cells["prefill_step_share"] >= 0.9]
    out.append(f"- Where chunking wins (goodput over 5% above unchunked): {len(wins)} of {len(gain)} "
               "(pair, workload, load) points, " + (", ".join(sorted({f'{w}' for w in wins['workload']})) or "none")
               + f"; the largest gain is {gain['gain_vs_unchunked'].max():.2f}x. The chapter's regime (a prefill in "
               f"at least 90% of steps) appears in {len(regime)} of {len(cells)} cells, in "
               + (", ".join(sorted(set(regime['workload']))) or "none") + ".")
    for r in pub.itertuples():
        out.append(f"- Published comparison ({r.slo} P99 TBT {r.p99_tbt_slo_s:g} s): chunked budget "
                   f"{r.sarathi_budget} serves {r.sarathi_capacity_req_per_s:.2f} req/s against "
                   f"{r.vllm_capacity_req_per_s:.2f} for the unchunked, prefill-first scheduler: {r.ratio:.2f}x, "
                   f"Sarathi-Serve reports {r.published_ratio}x (different datasets and kernels; see "
                   "docs/production-scale.md).")
    return out
