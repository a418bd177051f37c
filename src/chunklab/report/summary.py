"""REPORT.md's first lines: the chapter's question answered on this machine, per SLO, from the data.

At most MAX_LINES lines, each decided by a table further down and linked to it:
- per SLO: does a small budget help, hurt, or make no difference to capacity and to the share of
  requests within the SLO at each measured load (the paired verdicts of report/claims.py);
- the prefill share at which the simulated winner changes (report/share.py's map), where it exists;
- the trade the chapter names (worst stall, typical ITL, the chunked request's own TTFT) per load;
- why: the share of steps that carry a prefill, and the measured cost of chunking one prefill.
Nothing here reads a file: report/writeup.py passes what the other modules computed.
"""
from __future__ import annotations

import re

import pandas as pd

from chunklab.metrics.paired import FAILS, HOLDS, NOISE

MAX_LINES = 12
# The goodput claim is "the share within the SLO falls as the budget shrinks": holds = a small budget
# hurts, does not hold = it helps.
EFFECT = {HOLDS: "hurts", FAILS: "helps", NOISE: "makes no difference"}


def anchor(heading: str) -> str:
    """The link target GitHub (and most Markdown viewers) give a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower())
    return "#" + text.replace(" ", "-")


def _load_number(label: str) -> str:
    return label.split()[1]


def slo_line(name: str, text: str, within: pd.DataFrame, capacity: pd.DataFrame, capacity_link: str,
             claims_link: str) -> str:
    """One SLO: capacity by budget (measured), then what a small budget does at each load."""
    parts = [f"- **Under `{name}`** ({text}):"]
    cap = capacity[capacity["slo"] == name] if not capacity.empty and "slo" in capacity else pd.DataFrame()
    if not cap.empty:
        by_budget = cap.sort_values("budget")
        parts.append("capacity " + ", ".join(by_budget["capacity"])
                     + f" req/s at budgets {', '.join(str(int(b)) for b in by_budget['budget'])} "
                     f"([capacity]({capacity_link}));")
    rows = within[within["slo"] == name]
    if not rows.empty:
        effects = {}
        for r in rows.itertuples():
            effects.setdefault(EFFECT.get(r.verdict, r.verdict), []).append(_load_number(r.load))
        groups = list(effects.items())
        parts.append("; ".join((f"at loads {', '.join(loads)} a small budget **{effect}**" if k == 0 else
                                f"at {', '.join(loads)} it **{effect}**") for k, (effect, loads) in enumerate(groups))
                     + f" (share within the SLO, [claims]({claims_link})).")
    return " ".join(parts)


def trade_line(budget_rows: pd.DataFrame, link: str) -> str:
    """The chapter's three-sided trade, each claim's verdict per load."""
    parts = []
    for claim, rows in budget_rows.groupby("claim", sort=False):
        verdicts = {}
        for r in rows.itertuples():
            verdicts.setdefault(r.verdict, []).append(_load_number(r.load))
        parts.append(f"{claim}: " + ", ".join(f"{v} at {', '.join(loads)}" for v, loads in verdicts.items()))
    return "- The trade, smallest budget against largest: " + "; ".join(parts) + f" ([claims]({link}))."


def why_line(step_share: pd.DataFrame, split_ratio: float | None, link: str) -> str:
    """The share of steps carrying a prefill at the largest budget, and the cost of one chunked prefill."""
    parts = []
    if not step_share.empty:
        largest = step_share[step_share["budget"] == step_share["budget"].max()]
        smallest = step_share[step_share["budget"] == step_share["budget"].min()]
        parts.append(f"steps carrying a prefill: {', '.join(f'{100 * s:.0f}%' for s in largest['share'])} at budget "
                     f"{int(largest['budget'].iloc[0])} and {', '.join(f'{100 * s:.0f}%' for s in smallest['share'])} "
                     f"at budget {int(smallest['budget'].iloc[0])} over the loads")
    if split_ratio is not None:
        parts.append(f"one 1536-token prefill in 24 chunks of 64 takes {split_ratio:.2f}x its one-pass time")
    return f"- Why: {'; '.join(parts)} ([claims]({link}))." if parts else ""


def summary(machine: str, slo_texts: dict[str, str], verdicts: pd.DataFrame, capacity: pd.DataFrame,
            step_share: pd.DataFrame, split_ratio: float | None, share_lines: list[str],
            links: dict[str, str], capacity_floor: float | None = None) -> list[str]:
    """The summary lines. verdicts: all_verdicts (claims, within-SLO, split); capacity: report/capacity.py's
    grid_capacity (slo, budget, capacity as text); step_share: load, budget, share (median over seeds); share_lines: the prefill-share
    map's answer, one line per SLO, already linked; links: anchors of the claims and capacity sections;
    capacity_floor: report/capacity.capacity_floor (the reference cell measured twice), where known."""
    lines = [f"**The answer on this machine** ({machine}): when does a small token budget pay? "
             "Each line is decided by the table it links to, by the report's one paired rule."
             + (f" The reference capacity, measured twice in this repro (bisection and grid), differs by "
                f"{capacity_floor:.0%}: one pair, the only repeat of a capacity here." if capacity_floor is not None
                else "")]
    within = verdicts[verdicts.get("slo", pd.Series("", index=verdicts.index)).fillna("") != ""] \
        if not verdicts.empty else verdicts
    for name, text in slo_texts.items():
        lines.append(slo_line(name, text, within, capacity, links["capacity"], links["claims"]))
    lines += share_lines
    budget_rows = verdicts[(verdicts.get("slo", pd.Series("", index=verdicts.index)).fillna("") == "")
                           & verdicts["key"].str.match(r"(worst_stall|typical_itl|chunked_ttft)\.")] \
        if not verdicts.empty else verdicts
    if not budget_rows.empty:
        lines.append(trade_line(budget_rows, links["claims"]))
    why = why_line(step_share, split_ratio, links["claims"])
    if why:
        lines.append(why)
    if len(lines) > MAX_LINES:
        raise ValueError(f"summary has {len(lines)} lines (at most {MAX_LINES}): shorten it")
    return lines
