"""Small per-run figure: TTFT ECDF and the per-gap ITL distribution.

Plain matplotlib: every run draws it, and seaborn's import (scipy.stats) alone costs
~130 MB of memory, which a long simulated run cannot spare. The pipeline's report
figures (chunklab.report.figures) use seaborn.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from chunklab.metrics.records import RequestRecord


def latency_figure(records: list[RequestRecord], title: str, path: Path) -> Path:
    done = [r for r in records if r.status == "finished"]
    fig = Figure(figsize=(9, 3.2))  # no pyplot: nothing to register or close, Agg picked by savefig
    a, b = fig.subplots(1, 2)
    if not done:
        counts = ", ".join(f"{sum(r.status == s for r in records)} {s}" for s in ("rejected", "unfinished"))
        for ax in (a, b):
            ax.axis("off")
        a.text(1.1, 0.5, f"nothing to plot: no request finished ({counts}; reasons in requests.csv)",
               ha="center", va="center", transform=a.transAxes)
    else:
        for label in sorted({r.label or "all" for r in done}):
            x = np.sort([r.ttft_s for r in done if (r.label or "all") == label])
            a.step(x, np.arange(1, x.size + 1) / x.size, where="post", label=label)
        a.legend(title="class", fontsize=8)
        gaps = np.concatenate([np.frombuffer(r.gaps_s, dtype=float) for r in done])
        gaps = gaps[gaps > 0]
        if gaps.size:
            counts, edges = np.histogram(gaps, bins=np.geomspace(gaps.min(), gaps.max() * 1.0001, 50))
            b.stairs(counts, edges, fill=True)  # one artist, where hist draws a patch a bin
            b.set_xscale("log")
            # Plain decimal labels and no minor ticks: a log axis's default 10^k labels go through
            # mathtext's parser, the larger part of this figure's time.
            b.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            b.xaxis.set_minor_locator(NullLocator())
    a.set(xlabel="seconds", ylabel="share of requests")
    b.set(xlabel="seconds")
    # A title at a fixed height: placed automatically, it measures every tick label's box first (~5 ms).
    a.set_title("TTFT", y=1.0)
    b.set_title("inter-token gaps (every gap)", y=1.0)
    fig.suptitle(title, fontsize=9)
    # Fixed margins and light compression: tight_layout and default PNG compression took ~0.5 s,
    # more than a whole simulated 200-request run.
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.16, top=0.84, wspace=0.25)
    fig.savefig(path, dpi=100, pil_kwargs={"compress_level": 1})
    return path
