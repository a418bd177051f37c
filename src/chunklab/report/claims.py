"""The chapter's claims about the token budget, decided by the measured requests, one load at a time,
by the report's one rule (metrics/paired.py): a paired bootstrap interval of the change.

Each claim compares the smallest budget measured at a load with the largest, on the same requests
(the same seeds, arrivals and lengths at every budget), paired by (seed, request id): a statistic
that should move one way when the budget shrinks. The change is (small - large) over the larger.
- worst stall: the largest gap of any request (claimed lower);
- typical ITL: the median of every gap of every request (claimed higher);
- the chunked request's own TTFT: the median TTFT of the long-prompt requests (claimed higher);
- goodput, restated per SLO: the share of requests within the SLO (claimed lower). An SLO applies
  after the run, so every run is scored under each; a scaled SLO's verdict is also given with its
  multiples halved and doubled (does the direction hold when the SLO moves?).
Nothing here reads a file: report/claim_text.py builds the tables and prints what these return.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from chunklab.config import SloConfig
from chunklab.metrics.paired import FAILS, HOLDS, NA, NOISE, SCORE, Interval, interval, of_pooled, of_values
from chunklab.metrics.summary import meets_slo_table

__all__ = ["FAILS", "HOLDS", "NA", "NOISE", "SCORE", "BUDGET_CLAIMS", "budget_verdicts", "slo_verdicts",
           "split_verdicts", "where_key"]

SPLIT_CLAIM = "splitting a 1536-token prefill into 24 x 64 is faster than one pass"
SPLIT_KEY = "split_faster"


@dataclass(frozen=True)
class Claim:
    key: str  # its name in `dvc metrics show` (chapter.verdict.<key>.<where>)
    text: str
    smaller_budget: str  # "higher" or "lower": how the statistic moves when the budget shrinks
    unit: str  # "ms" or "s": how the evidence prints it
    units: Callable[[pd.DataFrame], pd.Series]  # which paired requests count (a boolean mask)
    statistic: Callable[[pd.DataFrame], Callable]  # the arm's requests -> metrics.paired Statistic


def _gaps(arm: pd.DataFrame) -> list[np.ndarray]:
    return [np.array(s.split(), dtype=float) if isinstance(s, str) and s else np.empty(0) for s in arm["gaps_s"]]


FINISHED = lambda d: (d["status_small"] == "finished") & (d["status_large"] == "finished")  # noqa: E731
BUDGET_CLAIMS = (
    Claim("worst_stall", "the worst stall (the longest gap of any request, every seed) shrinks", "lower", "ms", FINISHED,
          lambda arm: of_values(arm["max_gap_s"].fillna(0.0), np.max)),
    Claim("typical_itl", "typical ITL (p50 of every gap, every seed) rises", "higher", "ms", FINISHED,
          lambda arm: of_pooled(_gaps(arm), np.median)),
    Claim("chunked_ttft", "the chunked (long-prompt) requests' own TTFT p50 (every seed) grows", "higher", "s",
          lambda d: FINISHED(d) & (d["label_small"] == "long"), lambda arm: of_values(arm["ttft_s"], np.median)),
)


def where_key(label: str) -> str:
    """A load label as a metric key: 'load 0.85 of ...' -> load_0_85, '8 req/s ...' -> rate_8."""
    words = label.split()
    number = words[1] if words[0] == "load" else words[0]
    return f"{'load' if words[0] == 'load' else 'rate'}_{number.replace('.', '_')}"


def _fmt(value: float, unit: str) -> str:
    if unit == "ms":
        return f"{1e3 * value:.2f}" if abs(value) < 0.01 else f"{1e3 * value:.1f}"
    if unit == "%":
        return f"{100 * value:.1f}%"
    return f"{value:.3f}"


def pair(at_load: pd.DataFrame, small: int, large: int) -> pd.DataFrame:
    """The two budgets' requests side by side, one row per (seed, request id) both served."""
    keys = ["seed", "request_id"]
    a = at_load[at_load["budget"] == small]
    b = at_load[at_load["budget"] == large]
    return a.merge(b, on=keys, suffixes=("_small", "_large"), how="inner")


def arm(paired: pd.DataFrame, side: str) -> pd.DataFrame:
    """One side of `pair`'s table with its own column names."""
    cols = [c for c in paired.columns if c.endswith(f"_{side}")]
    return paired[["seed", "request_id"] + cols].rename(columns={c: c.removesuffix(f"_{side}") for c in cols})


def compare(paired: pd.DataFrame, statistic: Callable[[pd.DataFrame], Callable]) -> Interval:
    """The paired interval of the change from the large budget to the small one, seeds as clusters."""
    return interval(statistic(arm(paired, "large")), statistic(arm(paired, "small")), paired["seed"].to_numpy())


def _row(load: str, claim: str, small: int, large: int, iv: Interval | None, verdict: str, unit: str, key: str,
         slo: str = "") -> dict:
    return {"load": load, "claim": claim, "slo": slo, "budget small": small, "budget large": large,
            "small": np.nan if iv is None else iv.b, "large": np.nan if iv is None else iv.a,
            "change": "" if iv is None else iv.text(), "verdict": verdict, "unit": unit,
            "seeds": 0 if iv is None else iv.clusters, "requests": 0 if iv is None else iv.units, "key": key}


def _budgets(at_load: pd.DataFrame) -> tuple[int, int] | None:
    budgets = sorted(at_load["budget"].unique())
    return (int(budgets[0]), int(budgets[-1])) if len(budgets) >= 2 else None


def budget_verdicts(requests: pd.DataFrame) -> pd.DataFrame:
    """requests: one row per measured request with load (a label), budget, seed, request_id, label,
    status, ttft_s, max_gap_s, gaps_s. One row per (load, claim)."""
    rows = []
    for load, at_load in requests.groupby("load", sort=False):
        pair_budgets = _budgets(at_load)
        for claim in BUDGET_CLAIMS:
            key = f"{claim.key}.{where_key(load)}"
            if pair_budgets is None:
                rows.append(_row(load, claim.text, 0, 0, None, NA, claim.unit, key))
                continue
            paired = pair(at_load, *pair_budgets)
            paired = paired[claim.units(paired)]
            if paired.empty:
                rows.append(_row(load, claim.text, *pair_budgets, None, NA, claim.unit, key))
                continue
            iv = compare(paired, claim.statistic)
            rows.append(_row(load, claim.text, *pair_budgets, iv, iv.verdict(claim.smaller_budget), claim.unit, key))
    return pd.DataFrame(rows)


def slo_verdicts(requests: pd.DataFrame, slos: dict[str, dict[str, SloConfig]]) -> pd.DataFrame:
    """The goodput claim per SLO: the share of requests within it falls when the budget shrinks.
    slos: {name: {factor ("0.5", "1", "2"): bounds}}; factor "1" decides, the others are the robustness
    columns (verdict_x0.5, verdict_x2)."""
    rows = []
    for load, at_load in requests.groupby("load", sort=False):
        pair_budgets = _budgets(at_load)
        if pair_budgets is None:
            continue
        paired = pair(at_load, *pair_budgets)
        for name, by_factor in slos.items():
            verdicts = {}
            for factor, slo in by_factor.items():
                met = {side: meets_slo_table(arm(paired, side), slo).astype(float) for side in ("small", "large")}
                iv = interval(of_values(met["large"], np.mean), of_values(met["small"], np.mean), paired["seed"])
                verdicts[factor] = (iv, iv.verdict("lower"))
            iv, verdict = verdicts["1"]
            row = _row(load, f"the share of requests within `{name}` falls", *pair_budgets, iv, verdict, "%",
                       f"within_slo.{name}.{where_key(load)}", slo=name)
            for factor in ("0.5", "2"):
                row[f"verdict_x{factor}"] = verdicts[factor][1] if factor in verdicts else ""
            rows.append(row)
    return pd.DataFrame(rows)


def split_verdicts(split: pd.DataFrame) -> pd.DataFrame:
    """split: the prefill_split table (attention, passes, times_ms: each timed round's). Per attention
    path, 24 passes of 64 tokens against one pass, paired by round (rounds interleave every path)."""
    rows = []
    for attention, g in split.groupby("attention", sort=False):
        one, many = g[g["passes"] == 1], g[g["passes"] == 24]
        if one.empty or many.empty or "times_ms" not in g:
            continue
        o = np.array(str(one.iloc[0]["times_ms"]).split(), dtype=float) / 1e3  # seconds, as every claim's values
        m = np.array(str(many.iloc[0]["times_ms"]).split(), dtype=float) / 1e3
        iv = interval(of_values(o, np.median), of_values(m, np.median), np.arange(len(o)))
        rows.append({"load": f"`{attention}` attention", "attention": attention, "claim": SPLIT_CLAIM,
                     "verdict": iv.verdict("lower"), "small": iv.b, "large": iv.a, "change": iv.text(),
                     "unit": "ms", "seeds": 0, "requests": iv.units, "key": f"{SPLIT_KEY}.{attention}"})
    return pd.DataFrame(rows)


def verdict_table(verdicts: pd.DataFrame) -> str:
    """where | claim | small budget | large budget | change [95% CI] | verdict: at most 8 columns."""
    out = pd.DataFrame({
        "where": verdicts["load"], "claim": verdicts["claim"],
        "smallest budget": [_evidence(r.small, r.unit, r.get("budget small")) for _, r in verdicts.iterrows()],
        "largest budget": [_evidence(r.large, r.unit, r.get("budget large")) for _, r in verdicts.iterrows()],
        "change, small vs large [95% CI]": verdicts["change"], "verdict": verdicts["verdict"]})
    return out.to_markdown(index=False)


def _evidence(value: float, unit: str, budget) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "n/a"
    label = f"{int(budget)}: " if budget is not None and not (isinstance(budget, float) and np.isnan(budget)) else ""
    suffix = {"ms": " ms", "s": " s", "%": ""}[unit]
    return f"{label}{_fmt(value, unit)}{suffix}"
