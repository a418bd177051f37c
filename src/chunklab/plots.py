"""Small per-run figure: TTFT ECDF and the per-gap ITL distribution."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from chunklab.metrics.records import RequestRecord  # noqa: E402


def latency_figure(records: list[RequestRecord], title: str, path: Path) -> Path:
    done = [r for r in records if r.status == "finished"]
    if not done:
        return _nothing_to_plot(records, title, path)
    ttft = pd.DataFrame({"ttft_s": [r.ttft_s for r in done], "class": [r.label or "all" for r in done]})
    gaps = pd.DataFrame({"itl_s": [g for r in done for g in r.gaps_s]})
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    sns.ecdfplot(ttft, x="ttft_s", hue="class", ax=a)
    a.set(title="TTFT", xlabel="seconds")
    if len(gaps):
        sns.histplot(gaps, x="itl_s", log_scale=True, ax=b)
    b.set(title="inter-token gaps (every gap)", xlabel="seconds")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _nothing_to_plot(records: list[RequestRecord], title: str, path: Path) -> Path:
    counts = ", ".join(f"{sum(r.status == s for r in records)} {s}" for s in ("rejected", "unfinished"))
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.axis("off")
    ax.text(0.5, 0.5, f"nothing to plot: no request finished ({counts}; reasons in requests.csv)",
            ha="center", va="center")
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
