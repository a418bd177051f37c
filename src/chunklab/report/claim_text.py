"""REPORT.md's claims section and `dvc metrics show`'s headline numbers: the fidelity stage's measured
requests of the ch10 mix (every budget at every load, five seeds of the same arrivals), the verdicts
(report/claims.py, by the one paired rule of metrics/paired.py), the capacity per budget and SLO
(the capacity stage's), and the share of steps that carry a prefill."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd

from chunklab.config import SloConfig
from chunklab.metrics.paired import LEVEL, MIN_EFFECT, RESAMPLES
from chunklab.metrics.summary import meets_slo_table
from chunklab.report.capacity import grid_capacity
from chunklab.report.claims import NA, SCORE, budget_verdicts, slo_verdicts, split_verdicts, verdict_table
from chunklab.report.disagg_text import disagg_metrics
from chunklab.report.production import production_metrics

CLAIMS_HEADING = "### The chapter's claims, decided by the data (measured)"
RULE = (f"**One rule** (metrics/paired.py): the change of a statistic from the largest budget to the smallest "
        "(relative to the larger of the two), "
        f"on the same requests (seeds and request ids paired), with its {LEVEL:.0%} interval from a two-stage "
        f"bootstrap ({RESAMPLES} draws of seeds, then of requests within each seed). **holds**: the interval lies "
        f"wholly on the claimed side of zero and the change is at least {MIN_EFFECT:.0%}; **does not hold**: it "
        "lies wholly on the other side; **within noise**: otherwise.")


def capacity_table(outputs: Path) -> pd.DataFrame:
    """The capacity stage's cells (budget, slo, measured and simulated req/s), empty without it."""
    path = outputs / "capacity" / "measured_vs_simulated.csv"
    return pd.read_csv(path) if path.is_file() else pd.DataFrame()


def measured_capacity(outputs: Path) -> float | None:
    """The reference capacity (req/s) every measured load is a fraction of: the capacity stage's first row."""
    table = capacity_table(outputs)
    return float(table["measured_req_per_s"].iloc[0]) if not table.empty else None


def reference_label(outputs: Path) -> str:
    """'budget 512 under `chapter_scaled`': the cell the loads are fractions of."""
    table = capacity_table(outputs)
    if table.empty:
        return "budget 512"
    row = table.iloc[0]
    return f"budget {int(row['budget'])}" + (f" under `{row['slo']}`" if "slo" in table else "")


def grid_only(runs: pd.DataFrame) -> pd.DataFrame:
    """The ch10 grid's runs, without the prefill-share cells (which have a long_share)."""
    return runs[runs["long_share"].isna()] if "long_share" in runs else runs


def _stamp(path: Path) -> float:
    """A file's modification time (0 when absent): the cache key of what is read from it."""
    return path.stat().st_mtime if path.is_file() else 0.0


def grid_requests(outputs: Path) -> pd.DataFrame:
    """Every measured request of the fidelity stage's ch10 grid, first repeat (each seed once), labelled
    by its load; empty without them. Read once per report (the summary, claims, capacity and metrics
    all read it); a copy, so no caller changes another's."""
    fid = outputs / "fidelity"
    return _grid_requests(outputs, _stamp(fid / "requests_measured.csv"), _stamp(fid / "runs.csv")).copy()


@functools.lru_cache(maxsize=4)
def _grid_requests(outputs: Path, *_stamps: float) -> pd.DataFrame:
    req_path, runs_path = outputs / "fidelity" / "requests_measured.csv", outputs / "fidelity" / "runs.csv"
    if not req_path.is_file() or not runs_path.is_file():
        return pd.DataFrame()
    runs = pd.read_csv(runs_path)
    runs = grid_only(runs[(runs["executor"] == "torch") & runs["load"].notna()])
    req = pd.read_csv(req_path, keep_default_na=True)
    req = req[req["repeat"] == 0].merge(runs[runs["repeat"] == 0][["point", "load"]], on="point")
    rates = req.groupby("load")["rate_per_s"].first()
    return req.assign(load=req["load"].map(lambda x: f"load {x:g} ({rates[x]:.2f} req/s)"))


def grid_runs(outputs: Path) -> pd.DataFrame:
    """The fidelity stage's measured runs of the ch10 grid, first repeat, labelled as grid_requests."""
    path = outputs / "fidelity" / "runs.csv"
    if not path.is_file():
        return pd.DataFrame()
    fid = pd.read_csv(path)
    fid = grid_only(fid[(fid["executor"] == "torch") & fid["load"].notna() & (fid["repeat"] == 0)])
    return fid.assign(load=[f"load {x:g} ({r:.2f} req/s)" for x, r in zip(fid["load"], fid["rate_per_s"])])


def scored_slos(outputs: Path) -> dict[str, dict[str, SloConfig]]:
    """The SLOs every measured request is scored under ({name: {factor: bounds}}), from the fidelity stage."""
    path = outputs / "fidelity" / "slos.json"
    if not path.is_file():
        return {}
    return {name: {f: SloConfig(**bounds) for f, bounds in by_factor.items()}
            for name, by_factor in json.loads(path.read_text()).items()}


def prefill_step_share(runs: pd.DataFrame) -> str:
    """The share of steps that carry prefill tokens, per load and budget (median over seeds): near 1,
    a prefill is always in flight (the chapter's explanation of when chunking loses)."""
    if runs.empty or "prefill_step_share" not in runs or runs["prefill_step_share"].isna().all():
        return ""
    share = runs.groupby(["load", "budget"], sort=False)["prefill_step_share"].median().unstack("budget")
    share = (100 * share).round(0).astype("Int64").astype(str) + "%"
    share.columns = [f"budget {b}" for b in share.columns]
    return ("Steps that carry prefill tokens (median over seeds), the chapter's explanation of when chunking "
            "loses:\n\n" + share.reset_index().rename(columns={"load": "where"}).to_markdown(index=False))


def all_verdicts(split: pd.DataFrame, outputs: Path) -> pd.DataFrame:
    fid = outputs / "fidelity"
    grid = _grid_verdicts(outputs, _stamp(fid / "requests_measured.csv"), _stamp(fid / "runs.csv"),
                          _stamp(fid / "slos.json"))
    return pd.concat([grid, split_verdicts(split)], ignore_index=True)


@functools.lru_cache(maxsize=4)
def _grid_verdicts(outputs: Path, *_stamps: float) -> pd.DataFrame:
    """The load grid's verdicts: bootstraps of seconds, computed once per report (the summary, the claims
    section and the metrics print them)."""
    grid = grid_requests(outputs)
    if grid.empty:
        return pd.DataFrame()
    return pd.concat([budget_verdicts(grid), slo_verdicts(grid, scored_slos(outputs))], ignore_index=True)


def _nest(tree: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        tree = tree.setdefault(p, {})
    tree[leaf] = value


def chapter_metrics(runs: pd.DataFrame, split: pd.DataFrame, outputs: Path) -> dict:
    """The headline numbers for `dvc metrics show`, nested so that DVC prints short dotted keys
    (REPORT.md has the words):
    - chapter.verdict.<claim>.<where> and chapter.verdict.within_slo.<slo>.<where>: each decided verdict
      as 1 (holds), 0 (within noise) or -1 (does not hold), where = load_0_85 (of the reference capacity)
      or the attention path of the prefill split (chapter.verdict.split_faster.paged);
    - chapter.prefill_split.paged_24x64_over_1x1536;
    - chapter.capacity.reference_req_per_s (the capacity stage's reference cell) and
      chapter.capacity.b<budget>.<slo>: capacity on the load grid (report/capacity.py), where it brackets it;
    - production.* and disagg.*: the simulated sections' answers (report/production.py, disagg_text.py)."""
    chapter: dict[str, dict] = {"verdict": {}}
    for v in all_verdicts(split, outputs).itertuples():
        if v.verdict in SCORE:
            _nest(chapter["verdict"], v.key, SCORE[v.verdict])
    ms = {(r.attention, r.passes): r.median_ms for r in split.itertuples()}
    if ("paged", 1) in ms and ("paged", 24) in ms:
        chapter["prefill_split"] = {"paged_24x64_over_1x1536": round(ms[("paged", 24)] / ms[("paged", 1)], 4)}
    reference = measured_capacity(outputs)
    if reference:
        chapter["capacity"] = {"reference_req_per_s": round(reference, 4)}
    grid = grid_requests(outputs)
    if not grid.empty:  # the grid's capacity per budget and SLO, where the grid brackets it
        for r in grid_capacity(grid, scored_slos(outputs)).itertuples():
            if r.capacity_req_per_s == r.capacity_req_per_s:  # not nan
                chapter.setdefault("capacity", {}).setdefault(f"b{r.budget}", {})[r.slo] = round(r.capacity_req_per_s, 4)
    return {"chapter": chapter} | production_metrics(outputs) | disagg_metrics(outputs)


def claim_findings(runs: pd.DataFrame, split: pd.DataFrame, outputs: Path) -> list[str]:
    verdicts = all_verdicts(split, outputs)
    undecided = list(dict.fromkeys(verdicts.loc[verdicts["verdict"] == NA, "load"]))
    decided = verdicts[verdicts["verdict"] != NA]
    grid = grid_requests(outputs)
    seeds = sorted(int(s) for s in grid["seed"].unique()) if not grid.empty else []
    lines = [CLAIMS_HEADING,
             f"Each claim compares the smallest budget measured at a load with the largest, on the same "
             f"{grid.groupby(['load', 'budget']).size().max() if not grid.empty else 0} requests per load "
             f"(seeds {', '.join(map(str, seeds))}; loads are fractions of {reference_label(outputs)}'s measured "
             "capacity). " + RULE]
    body = decided[decided["slo"].fillna("") == ""] if "slo" in decided else decided
    lines.append(verdict_table(body))
    within = decided[decided["slo"].fillna("") != ""] if "slo" in decided else decided.iloc[0:0]
    if not within.empty:
        lines += ["Goodput, restated per SLO: the share of requests within each SLO, smallest budget against "
                  "largest (an SLO applies after the run: the same requests scored under each). The last two "
                  "columns repeat the verdict with a scaled SLO's multiples halved and doubled.",
                  robustness_table(within)]
    top = top_load_line(grid, scored_slos(outputs))
    if top:
        lines.append(top)
    if undecided:
        lines.append(f"No verdict at {', '.join(undecided)}: one budget was measured there.")
    share = prefill_step_share(grid_runs(outputs))
    if share:
        lines.append(share)
    return lines


def top_load_line(grid: pd.DataFrame, slos: dict[str, dict[str, SloConfig]], target: float = 0.9) -> str:
    """Is the grid's highest load past capacity? Per SLO and budget, the share of its requests within the
    SLO at that load (every seed pooled), against the capacity target."""
    if grid.empty or not slos:
        return ""
    top = grid[grid["load"] == max(grid["load"].unique(), key=lambda label: float(label.split()[1]))]
    parts = []
    for name, by_factor in slos.items():
        shares = {int(b): float(meets_slo_table(g, by_factor["1"]).mean()) for b, g in top.groupby("budget")}
        past = [b for b, share in shares.items() if share < target]
        parts.append(f"`{name}`: " + ", ".join(f"{b}: {100 * share:.0f}%" for b, share in shares.items())
                     + (f" (past capacity at budget{'s' if len(past) > 1 else ''} {', '.join(map(str, past))})"
                        if past else " (within capacity at every budget)"))
    return (f"At the grid's highest load, {top['load'].iloc[0]}, the share of requests within each SLO by budget "
            f"(every seed; capacity is {target:.0%}): " + "; ".join(parts) + ".")


def robustness_table(within: pd.DataFrame) -> str:
    """where | SLO | smallest | largest | change [CI] | verdict | x0.5 | x2: 8 columns."""
    def pct(value, budget) -> str:
        return f"{int(budget)}: {100 * value:.0f}%"
    return pd.DataFrame({
        "where": within["load"], "SLO": [f"`{s}`" for s in within["slo"]],
        "smallest budget": [pct(v, b) for v, b in zip(within["small"], within["budget small"])],
        "largest budget": [pct(v, b) for v, b in zip(within["large"], within["budget large"])],
        "change [95% CI]": within["change"], "verdict": within["verdict"],
        "multiples x0.5": within["verdict_x0.5"].replace("", "absolute"),
        "multiples x2": within["verdict_x2"].replace("", "absolute")}).to_markdown(index=False)
