"""One value per quantity: a quantity REPORT.md prints in two places carries the same value in both.
Read on the committed report (outputs/REPORT.md, written by `dvc repro`)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def report() -> str:
    return (ROOT / "outputs" / "REPORT.md").read_text()


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def header(text: str, heading: str) -> list[str]:
    """The column names of the first table under the heading that starts with `heading`."""
    return cells(next(line for line in text[text.index(heading):].split("\n") if line.startswith("|")))


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of every row of the first table under the heading that starts with `heading`."""
    section = text[text.index(heading):]
    lines = section.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_capacity_in_the_summary_is_the_capacity_table_s():
    text = report()
    heading = "### Capacity per budget and SLO: measured on the load grid"
    rows = table_rows(text, heading)
    column = header(text, heading).index("capacity (req/s)")
    table = {(r[0].strip("`"), r[1]): r[column] for r in rows}
    lines = re.findall(r"\*\*Under `(\w+)`\*\*.*?capacity ([\d., <>]+) req/s at budgets ([\d, ]+) \(", text)
    assert lines, "the summary quotes no capacity"
    for slo, values, budgets in lines:
        for value, budget in zip(values.split(", "), budgets.split(", ")):
            assert table[(slo, budget)] == value, (slo, budget)


def test_the_chapter_rate_findings_quote_the_repeats_table():
    text = report()
    rows = {r[0]: r for r in table_rows(text, "### MEASURED. Token budget, ch10 mix, ")}
    m = re.search(r"TTFT p50 ([\d.]+) s at budget (\d+), ([\d.]+) s at budget (\d+);", text)
    assert m, "no findings line at the chapter's rate"
    for value, budget in ((m[1], m[2]), (m[3], m[4])):
        row = next(r for name, r in rows.items() if name.startswith(f"Budget {budget} "))
        assert row[3].split()[0] == value, (budget, row[3])
