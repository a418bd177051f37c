"""REPORT.md's prefill-share section: the simulated map of which budget serves the most at each
long-prompt share and SLO (stages/sim_share.py), and the measured cells that check it: their paired
per-request error against the simulation beside the repeat-vs-repeat floor (the fidelity stage's)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

HEADING = "### Prefill share against budget: which budget serves the most (simulated)"  # stages/sim_share.py's


def measured_cells(outputs: Path) -> str:
    """point | metric | simulated vs measured | measured vs measured | ratio: the share cells' paired errors."""
    path = outputs / "fidelity" / "paired_before_after.csv"
    if not path.is_file():
        return ""
    t = pd.read_csv(path)
    t = t[t["point"].str.contains(" long ")]
    if t.empty:
        return ""
    sim = t[t["fit"] == "probe + serving"].set_index(["point", "metric"])["median_rel_error"]
    floor = t[t["fit"] == "measured repeat vs repeat"].set_index(["point", "metric"])["median_rel_error"]
    both = pd.DataFrame({"simulated vs measured": sim, "repeat vs repeat (floor)": floor}).dropna().reset_index()
    both["error / floor"] = both["simulated vs measured"] / both["repeat vs repeat (floor)"]
    for c in ("simulated vs measured", "repeat vs repeat (floor)"):
        both[c] = (100 * both[c]).map("{:.1f}%".format)
    both["error / floor"] = both["error / floor"].map("{:.2f}".format)
    return ("MEASURED cells of the map (the fidelity stage's runs of the same mixes, each repeated): the median "
            "per-request error of the simulation, paired by request id, beside the same error between two "
            "measured repeats (this machine's floor):\n\n" + both.to_markdown(index=False))


def share_section(outputs: Path) -> list[str]:
    table = outputs / "simulated" / "tables" / "share.md"
    if not table.is_file():
        return []
    cells = measured_cells(outputs)
    return ["## Prefill share: when does a small budget pay? (simulated, measured cells)",
            table.read_text(), *([cells] if cells else [])]


def share_summary(outputs: Path, link: str) -> list[str]:
    """One line: per SLO, the shares at which a small budget helps or hurts capacity, and the crossover."""
    path = outputs / "simulated" / "share" / "verdicts.csv"
    if not path.is_file():
        return []
    v = pd.read_csv(path)
    parts = []
    for slo, g in v.groupby("slo", sort=False):
        effects = {}
        for r in g.sort_values("share").itertuples():
            effects.setdefault(r.small_budget_effect, []).append(f"{100 * r.share:.0f}%")
        parts.append(f"under `{slo}` a small budget " + ", ".join(f"{e} at {', '.join(s)}" for e, s in effects.items()))
    return [f"- Prefill share (long prompts, simulated capacity, paired over seeds): {'; '.join(parts)} "
            f"([share map]({link}))."]
