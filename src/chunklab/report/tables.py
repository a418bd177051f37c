"""The chapter's two tables, reproduced, with ours beside them. Markdown and CSV.

The CSV beside each table holds every column; its markdown is for reading: at most MAX_COLUMNS
columns a table (a wide one is split, each part repeating the columns that name the row), and a
column that is n/a, or the same, in every row is said once in a line under it instead."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.report import chapter

CHAPTER_COLUMNS = [  # (metric, header, unit scale, format)
    ("ttft_p50_s", "TTFT p50 (s)", 1, "{:.3f}"),
    ("ttft_p95_s", "TTFT p95 (s)", 1, "{:.3f}"),
    ("tpot_p50_s", "ITL p50 as the chapter defined it = TPOT p50 (s)", 1, "{:.4f}"),
    ("output_tokens_per_s", "Output tok/s", 1, "{:.1f}"),
    ("goodput_req_per_s", "Goodput req/s", 1, "{:.3f}"),
]
OUR_COLUMNS = [
    ("itl_p50_s", "ITL p50, per gap (ms)", 1e3, "{:.1f}"),
    ("itl_p99_s", "ITL p99, per gap (ms)", 1e3, "{:.1f}"),
    ("worst_stall_s", "Worst stall (ms)", 1e3, "{:.0f}"),
    ("class_long_ttft_p50_s", "Long-prompt TTFT p50 (s)", 1, "{:.3f}"),
    ("class_short_ttft_p50_s", "Short-prompt TTFT p50 (s)", 1, "{:.3f}"),
    ("class_long_slowdown_p50", "Long-prompt slowdown p50", 1, "{:.2f}"),
    ("class_short_slowdown_p50", "Short-prompt slowdown p50", 1, "{:.2f}"),
    ("slo_attainment", "In SLO", 100, "{:.0f}%"),
    ("preemptions", "Preemptions", 1, "{:.0f}"),
    ("prefill_step_share", "Steps with a prefill", 100, "{:.0f}%"),
]


def spread(values: pd.Series, scale: float, fmt: str) -> str:
    v = values.dropna() * scale
    if v.empty:
        return "n/a"
    if len(v) == 1:
        return fmt.format(v.iloc[0])
    return f"{fmt.format(v.median())} [{fmt.format(v.min())}–{fmt.format(v.max())}]"


def token_budget_table(runs: pd.DataFrame, by: list[str], count: str) -> pd.DataFrame:
    """One row per group of `by`: median [min–max] of each metric over the group's runs."""
    rows = []
    for key, group in runs.groupby(by, sort=False):
        key = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        budget = key["budget"]
        row = {"Configuration": f"Budget {budget} tokens/step" + (" (no chunking)" if budget >= 2048 else "")}
        if "intensity" in key:
            row["Arrivals"] = f"{key['intensity']} ({group['rate_per_s'].iloc[0]:.2f} req/s)"
        row[count] = len(group)
        for k, header, scale, fmt in CHAPTER_COLUMNS + OUR_COLUMNS:
            row[header] = spread(group[k], scale, fmt) if k in group else "n/a"
        rows.append(row)
    return pd.DataFrame(rows)


def chapter_budget_table() -> pd.DataFrame:
    return pd.DataFrame([{"Configuration": f"Budget {b} (chapter)"} |
                         {header: fmt.format(m[key] * scale) for key, header, scale, fmt in CHAPTER_COLUMNS}
                         for b, m in chapter.TOKEN_BUDGET.items()])


def prefill_split_table(split: pd.DataFrame) -> pd.DataFrame:
    wide = split.pivot(index=["passes", "chunk_tokens"], columns="attention", values="median_ms").reset_index()
    wide = wide.sort_values("passes")
    out = pd.DataFrame({"Passes": wide["passes"], "Tokens per pass": wide["chunk_tokens"]})
    for impl in ("paged", "sdpa", "naive"):
        if impl in wide:
            out[f"Total time, {impl} (ms)"] = wide[impl].map("{:.1f}".format)
    out["Chapter (ms)"] = [f"{chapter.PREFILL_SPLIT_MS[p]:.1f}" if p in chapter.PREFILL_SPLIT_MS else ""
                           for p in out["Passes"]]
    return out


MAX_COLUMNS = 8
ID_COLUMNS = ("Configuration", "Arrivals", "Repeats", "Seeds", "Passes", "Tokens per pass")  # name a row


def readable(table: pd.DataFrame) -> tuple[list[pd.DataFrame], list[str]]:
    """The table as parts of at most MAX_COLUMNS columns, and the lines that say what was left out of them:
    the columns n/a in every row, and those with one value in every row (with that value)."""
    ids = [c for c in table.columns if c in ID_COLUMNS]
    values = [c for c in table.columns if c not in ID_COLUMNS]
    missing = [c for c in values if (table[c].astype(str) == "n/a").all()]
    same = [c for c in values if c not in missing and len(table) > 1 and table[c].astype(str).nunique() == 1]
    shown = [c for c in values if c not in missing and c not in same]
    width = MAX_COLUMNS - len(ids)
    parts = [table[ids + shown[i:i + width]] for i in range(0, len(shown), width)] or [table[ids]]
    lines = []
    if same:
        lines.append("The same in every row: " + "; ".join(f"{c} {table[c].iloc[0]}" for c in same) + ".")
    if missing:
        lines.append("Not measured in these runs (n/a in every row): " + ", ".join(missing) + ".")
    return parts, lines


def write(table: pd.DataFrame, path: Path, title: str, notes: list[str]) -> str:
    """path.csv: every column; path.md: the title, the readable parts, what they leave out, the notes and
    a link to the CSV (relative to outputs/, where REPORT.md quotes it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    csv = path.with_suffix(".csv")
    table.to_csv(csv, index=False)
    parts, left_out = readable(table)
    link = f"Every column: [{path.parent.name}/{csv.name}]({path.parent.name}/{csv.name})." if len(parts) > 1 or left_out \
        else ""
    md = (f"### {title}\n\n" + "\n\n".join(part.to_markdown(index=False) for part in parts) + "\n\n"
          + "\n\n".join([*left_out, *notes, *([link] if link else [])]) + "\n")
    path.with_suffix(".md").write_text(md)
    return md


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("%x").replace(",", ""))
        return True
    except ValueError:
        return False


KEY_HEADERS = {"budget", "load", "repeat", "seed", "gpus", "rate_per_s", "rate (req/s)"}  # numbers that name a row


def narrow_markdown(text: str) -> str:
    """Every pipe table in text wider than MAX_COLUMNS split into parts that repeat its identifying
    columns (the first, and up to two more that hold labels or KEY_HEADERS): what a stage printed whole
    stays in its CSV, the report shows it in readable widths."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if not (lines[i].startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|:- ")):
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].startswith("|"):
            j += 1
        rows = [_cells(line) for line in lines[i:j]]
        width = len(rows[0])
        if width <= MAX_COLUMNS or any(len(r) != width for r in rows):
            out += lines[i:j]
        else:
            body, ids = rows[2:], 1
            while ids < 3 and (rows[0][ids].strip("` ").lower() in KEY_HEADERS
                               or not any(_is_number(r[ids]) for r in body)):
                ids += 1
            step = MAX_COLUMNS - ids
            for k in range(ids, width, step):
                keep = list(range(ids)) + list(range(k, min(k + step, width)))
                out += ["| " + " | ".join(r[c] for c in keep) + " |" for r in rows] + [""]
            out.pop()
        i = j
    return "\n".join(out)
