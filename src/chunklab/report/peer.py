"""Findings of the perf stage's comparison with vLLM (outputs/perf_vs_vllm.csv), in sentences."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from chunklab.peers.labels import AFTER_LABEL, BEFORE_COLUMN, BEFORE_LABEL


def peer_findings(outputs: Path) -> list[str]:
    path = outputs / "perf_vs_vllm.csv"
    if not path.is_file():
        return []
    df = pd.read_csv(path)
    if df.empty:
        return ["vLLM was not installed when the perf stage ran (`make peers`): no comparison, and no "
                "before / after serving runs (they run beside vLLM's)."]
    change = df["chunklab after"] / df[BEFORE_COLUMN]
    faster = df["unit"].eq("tok/s")
    gain = (change.where(faster, 1 / change) - 1) * 100  # positive: after is better
    lines = [f"Before ({BEFORE_LABEL}) and after ({AFTER_LABEL}; "
             f"MEASURED, same run): after is better in "
             f"{int((gain > 0).sum())} of {len(df)} measurements (median {gain.median():+.0f}%, "
             f"range {gain.min():+.0f}% to {gain.max():+.0f}%)."]
    if df["vLLM"].isna().all():
        return lines + ["vLLM was not installed when the perf stage ran (`make peers`): no comparison."]
    wins = df["at least as good as vLLM"].eq("yes")
    lost = df[~wins]
    lines.append(f"Against vLLM's CPU build (MEASURED, same run, same machine): chunklab is at least as good in "
                 f"{int(wins.sum())} of {len(df)} measurements.")
    if len(lost):
        worst = ", ".join(f"{r['measurement']} ({r['after / vLLM']:.2f}x vLLM's "
                          f"{'rate' if r['unit'] == 'tok/s' else 'time'})" for _, r in lost.iterrows())
        lines.append(f"It loses: {worst}.")
    return lines
