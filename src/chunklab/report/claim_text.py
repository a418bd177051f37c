"""REPORT.md's claims section and `dvc metrics show`'s headline numbers: every measured run that can
decide one of the chapter's claims, labelled by its load, the verdicts (report/claims.py), and the
share of steps that carry a prefill."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.report.claims import MIN_EFFECT, NA, SCORE, budget_verdicts, split_verdicts, verdict_table
from chunklab.report.disagg_text import disagg_metrics
from chunklab.report.production import production_metrics


def measured_capacity(outputs: Path) -> float | None:
    """This machine's measured capacity (req/s) from the capacity stage, None without it."""
    path = outputs / "capacity" / "measured_vs_simulated.csv"
    return float(pd.read_csv(path)["measured_req_per_s"].iloc[0]) if path.is_file() else None


def grid_runs(outputs: Path) -> pd.DataFrame:
    """The fidelity stage's measured runs of the ch10 mix (each budget at each load of the measured
    capacity), labelled by load; empty without them."""
    path = outputs / "fidelity" / "runs.csv"
    if not path.is_file():
        return pd.DataFrame()
    fid = pd.read_csv(path)
    fid = fid[(fid["executor"] == "torch") & fid["load"].notna()]
    return fid.assign(load=[f"load {x:g} of the measured capacity ({r:.2f} req/s)"
                            for x, r in zip(fid["load"], fid["rate_per_s"])])


def claim_runs(runs: pd.DataFrame, outputs: Path) -> pd.DataFrame:
    """Every measured run that can decide a budget claim, labelled by its load: the token-budget
    stage's repeats at the chapter's rate, and the fidelity stage's grid."""
    capacity = measured_capacity(outputs)
    large = runs[(runs["size"] == "large") & (runs["intensity"] == runs["intensity"].iloc[0])]
    repeated = large["seed"].value_counts().idxmax()  # the seed the stage repeats (its others ran once)
    rate = float(large["rate_per_s"].iloc[0])
    share = f", {rate / capacity:.2f} of the measured capacity" if capacity else ""
    frames = [large[large["seed"] == repeated].assign(load=f"{rate:g} req/s (the chapter's rate{share})")]
    return pd.concat(frames + [grid_runs(outputs)], ignore_index=True)


def prefill_step_share(claims: pd.DataFrame) -> str:
    """The share of steps that carry prefill tokens, per load and budget (median over repeats): near 1,
    a prefill is always in flight (the chapter's explanation of when chunking loses)."""
    if "prefill_step_share" not in claims or claims["prefill_step_share"].isna().all():
        return ""
    share = claims.groupby(["load", "budget"], sort=False)["prefill_step_share"].median().unstack("budget")
    share = (100 * share).round(0).astype("Int64").astype(str) + "%"
    share.columns = [f"budget {b}" for b in share.columns]
    return ("Steps that carry prefill tokens (median over repeats), the chapter's explanation of when chunking "
            "loses:\n\n" + share.reset_index().rename(columns={"load": "where"}).to_markdown(index=False))


def all_verdicts(runs: pd.DataFrame, split: pd.DataFrame, outputs: Path) -> pd.DataFrame:
    return pd.concat([budget_verdicts(claim_runs(runs, outputs)), split_verdicts(split)], ignore_index=True)


def chapter_metrics(runs: pd.DataFrame, split: pd.DataFrame, outputs: Path) -> dict:
    """The headline numbers for `dvc metrics show`, nested so that DVC prints short dotted keys
    (REPORT.md has the words):
    - chapter.verdict.<claim>.<where>: each decided verdict as 1 (holds), 0 (within noise) or -1 (does
      not hold), where = rate_8 (the chapter's rate), load_0_85 (of the measured capacity), or the
      attention path of the prefill split (chapter.verdict.split_faster.paged);
    - chapter.prefill_split.paged_24x64_over_1x1536, chapter.capacity.measured_b512_req_per_s and
      chapter.capacity.chapter_rate_share (the chapter's 8 req/s over it);
    - production.* and disagg.*: the simulated sections' answers (report/production.py, disagg_text.py)."""
    chapter: dict[str, dict] = {"verdict": {}}
    for v in all_verdicts(runs, split, outputs).itertuples():
        if v.verdict in SCORE:
            claim, where = v.key.split(".", 1)
            chapter["verdict"].setdefault(claim, {})[where] = SCORE[v.verdict]
    ms = {(r.attention, r.passes): r.median_ms for r in split.itertuples()}
    if ("paged", 1) in ms and ("paged", 24) in ms:
        chapter["prefill_split"] = {"paged_24x64_over_1x1536": round(ms[("paged", 24)] / ms[("paged", 1)], 4)}
    capacity = measured_capacity(outputs)
    if capacity:
        chapter["capacity"] = {"measured_b512_req_per_s": capacity,
                               "chapter_rate_share": round(float(runs["rate_per_s"].iloc[0]) / capacity, 4)}
    return {"chapter": chapter} | production_metrics(outputs) | disagg_metrics(outputs)


def claim_findings(runs: pd.DataFrame, split: pd.DataFrame, outputs: Path) -> list[str]:
    verdicts = all_verdicts(runs, split, outputs)
    undecided = list(dict.fromkeys(verdicts.loc[verdicts["verdict"] == NA, "load"]))
    verdicts = verdicts[verdicts["verdict"] != NA]
    lines = ["### The chapter's claims, decided by the data (measured)",
             "Each claim compares the smallest budget measured at a load with the largest: **holds** when "
             "their ranges over repeated runs do not overlap and the medians move as the chapter says by at least "
             f"{MIN_EFFECT:.0%}, **does not hold** when they move the other way, **within noise** when the "
             f"repeats' ranges overlap or the medians differ by less than {MIN_EFFECT:.0%} (with 2-3 repeats, "
             "ranges miss each other by chance alone one time in three to ten).",
             verdict_table(verdicts)]
    if undecided:
        lines.append(f"No verdict at {', '.join(undecided)}: one budget was measured there.")
    share = prefill_step_share(claim_runs(runs, outputs))
    if share:
        lines.append(share)
    return lines
