"""Pastes the regenerated tables (outputs/) into README.md between its results markers.

    .venv/bin/python scripts/readme_results.py    # after dvc repro
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [  # (README heading, tables, figures)
    ("Measured: token budget (the chapter's question on the real engine)",
     ["tables/token_budget_large.md", "tables/token_budget_seeds.md", "tables/token_budget_small.md",
      "tables/token_budget_chapter.md"], [("metrics vs budget", "plots/metrics_vs_budget.png")]),
    ("Fidelity: simulated against measured", ["tables/fidelity.md"], [("fidelity", "fidelity/fidelity.png")]),
    ("Simulated: capacity, and which budget at which load",
     ["simulated/tables/capacity.md", "tables/capacity.md", "simulated/tables/maps.md"],
     [("best budget", "simulated/maps/best_budget.png"), ("ch10 heatmaps", "simulated/maps/ch10_mixed_heatmaps.png")]),
    ("Simulated: the Azure conversation trace, every row", ["simulated/tables/traces.md"],
     [("queue", "simulated/traces/queue.png")]),
    ("Simulated: tuning", ["simulated/tables/tuning.md"], []),
    ("Measured: prefill split", ["tables/prefill_split.md"], []),
    ("Measured: performance (`perf` stage)", ["tables/perf.md"], []),
]
BEGIN, END = "<!-- results:begin (pasted from outputs/ after dvc repro) -->", "<!-- results:end -->"


def block() -> str:
    out = [BEGIN]
    for heading, tables, figures in SECTIONS:
        out.append(f"### {heading}\n")
        for table in tables:  # one heading level down: the README's sections hold them
            text = (ROOT / "outputs" / table).read_text().strip()
            out.append(re.sub(r"^(#+) ", r"#\1 ", text, flags=re.M) + "\n")
        out += [f"![{alt}](outputs/{path})\n" for alt, path in figures]
    return "\n".join(out + [END])


def main() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    readme.write_text(text[:start] + block() + text[end:])


if __name__ == "__main__":
    main()
