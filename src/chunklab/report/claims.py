"""The chapter's claims about the token budget, decided by the measured tables, one load at a time.

Each claim compares the smallest budget measured at a load with the largest: a metric that should
move one way when the budget shrinks. The verdict is
- "holds": the two budgets' ranges over their repeats do not overlap, and the medians move as claimed
  by at least MIN_EFFECT;
- "does not hold": the same, the medians moving the other way;
- "within noise": the ranges overlap (the repeats disagree by more than the budgets do), or the
  medians differ by less than MIN_EFFECT;
- "n/a": fewer than two budgets, or no repeat with the metric, at that load.
Why MIN_EFFECT: ranges of a few repeats fail to overlap by chance alone, for two budgets that
differ in nothing, one time in three with 2 repeats each and one in ten with 3 (the chance that
one sample's values all sort below the other's, either way). A median difference under 2% is not
read as an effect: at 8 req/s on the AMD EPYC VM (2026-12-07), every request in SLO at every
budget, two repeats put goodput at 6.688-6.694 req/s for budget 64 and 6.695 for 8192 (the
makespan's last milliseconds).
The evidence names the numbers that decided it. Nothing here reads a file: the report stage builds
the tables (report/claim_text.py) and prints what these functions return.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

HOLDS, FAILS, NOISE, NA = "holds", "does not hold", "within noise", "n/a"
SCORE = {HOLDS: 1, NOISE: 0, FAILS: -1}  # a verdict as a DVC metric (dvc metrics show prints numbers)
MIN_EFFECT = 0.02  # the smallest relative difference of medians read as an effect (see above)


@dataclass(frozen=True)
class Claim:
    key: str  # its name in `dvc metrics show` (chapter.verdict.<key>.<where>)
    text: str
    metric: str  # a column of the runs table
    smaller_budget: str  # "higher" or "lower": how the metric moves when the budget shrinks
    unit: str  # "s", "ms" or "req/s": how the evidence prints it


BUDGET_CLAIMS = (
    Claim("worst_stall", "the worst stall shrinks", "worst_stall_s", "lower", "ms"),
    Claim("typical_itl", "typical ITL (per-gap p50) rises", "itl_p50_s", "higher", "ms"),
    Claim("chunked_ttft", "the chunked (long-prompt) request's own TTFT p50 grows", "class_long_ttft_p50_s", "higher", "s"),
    Claim("goodput", "goodput falls", "goodput_req_per_s", "lower", "req/s"),
)
SPLIT_CLAIM = "splitting a 1536-token prefill into 24 x 64 is faster than one pass"
SPLIT_KEY = "split_faster"


def where_key(label: str) -> str:
    """A load label as a metric key: 'load 0.85 of ...' -> load_0_85, '8 req/s ...' -> rate_8."""
    words = label.split()
    number = words[1] if words[0] == "load" else words[0]
    return f"{'load' if words[0] == 'load' else 'rate'}_{number.replace('.', '_')}"


def _fmt(value: float, unit: str) -> str:
    """value in the metric's own unit (seconds for a latency) as the claim prints it."""
    if unit == "ms":  # two decimals under 10 ms: per-gap ITL differs in hundredths between budgets
        return f"{1e3 * value:.2f} ms" if abs(value) < 0.01 else f"{1e3 * value:.1f} ms"
    return f"{value:.3f} {unit}"


def decide(smaller: pd.Series, larger: pd.Series, smaller_budget: str) -> str:
    """The verdict for one metric: smaller and larger are its values over the repeats at each budget."""
    smaller, larger = smaller.dropna(), larger.dropna()
    if smaller.empty or larger.empty:
        return NA
    if smaller.min() <= larger.max() and larger.min() <= smaller.max():
        return NOISE
    if _relative_difference(smaller.median(), larger.median()) < MIN_EFFECT:
        return NOISE
    moved_up = smaller.median() > larger.median()
    return HOLDS if moved_up == (smaller_budget == "higher") else FAILS


def _relative_difference(a: float, b: float) -> float:
    """|a - b| over the larger of the two magnitudes."""
    return abs(a - b) / max(abs(a), abs(b))


def _range(values: pd.Series, unit: str) -> str:
    """The median over repeats, with their min-max and count."""
    values = values.dropna()
    if len(values) == 1:
        return f"{_fmt(float(values.iloc[0]), unit)} (1 run)"
    return (f"{_fmt(float(values.median()), unit)} [{_fmt(float(values.min()), unit)} to "
            f"{_fmt(float(values.max()), unit)}, {len(values)} repeats]")


def budget_verdicts(runs: pd.DataFrame) -> pd.DataFrame:
    """runs: one row per measured run with columns load (a label), budget, and the claims' metrics.
    One row per (load, claim): the verdict and its evidence, smallest budget against largest."""
    rows = []
    for load, at_load in runs.groupby("load", sort=False):
        budgets = sorted(at_load["budget"].unique())
        for claim in BUDGET_CLAIMS:
            if len(budgets) < 2 or claim.metric not in at_load:
                rows.append({"load": load, "claim": claim.text, "verdict": NA, "evidence": "one budget measured",
                             "key": f"{claim.key}.{where_key(load)}"})
                continue
            lo, hi = budgets[0], budgets[-1]
            small = at_load.loc[at_load["budget"] == lo, claim.metric]
            large = at_load.loc[at_load["budget"] == hi, claim.metric]
            rows.append({"load": load, "claim": claim.text, "verdict": decide(small, large, claim.smaller_budget),
                         "evidence": f"budget {lo}: {_range(small, claim.unit)}; budget {hi}: "
                                     f"{_range(large, claim.unit)}", "key": f"{claim.key}.{where_key(load)}"})
    return pd.DataFrame(rows, columns=["load", "claim", "verdict", "evidence", "key"])


def split_verdicts(split: pd.DataFrame) -> pd.DataFrame:
    """split: the prefill_split table (attention, passes, median_ms, min_ms, max_ms). Per attention path,
    24 passes of 64 tokens against one pass, each a median over its timed repeats with its min-max."""
    rows = []
    for attention, g in split.groupby("attention", sort=False):
        one, many = g[g["passes"] == 1], g[g["passes"] == 24]
        if one.empty or many.empty:
            continue
        o, m = one.iloc[0], many.iloc[0]
        overlap = m["min_ms"] <= o["max_ms"] and o["min_ms"] <= m["max_ms"]
        small = _relative_difference(m["median_ms"], o["median_ms"]) < MIN_EFFECT
        verdict = NOISE if overlap or small else HOLDS if m["median_ms"] < o["median_ms"] else FAILS
        rows.append({"load": f"`{attention}` attention", "attention": attention, "claim": SPLIT_CLAIM,
                     "verdict": verdict,
                     "evidence": f"24 x 64: {m['median_ms']:.1f} ms [{m['min_ms']:.1f}-{m['max_ms']:.1f}]; one pass: "
                                 f"{o['median_ms']:.1f} ms [{o['min_ms']:.1f}-{o['max_ms']:.1f}] "
                                 f"({m['median_ms'] / o['median_ms']:.2f}x)", "key": f"{SPLIT_KEY}.{attention}"})
    return pd.DataFrame(rows, columns=["load", "attention", "claim", "verdict", "evidence", "key"])


def verdict_table(verdicts: pd.DataFrame) -> str:
    return verdicts[["load", "claim", "verdict", "evidence"]].rename(columns={"load": "where"}).to_markdown(index=False)
