"""Maps of stage sim_disagg (SIMULATED): where colocated replicas or a prefill/decode split serve more
requests within SLO per GPU, and by how much, one figure per model/device pair and KV link."""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from chunklab.report.figures import _save  # noqa: E402

CLIP_LOG2 = 2.0  # colours saturate at 4x either way
OVERLOAD_SHARE = 0.1  # a side serving under this share within SLO is overloaded: its cell is grey, not a ratio


def cell_label(r: pd.Series) -> str:
    """What wins a cell and by how much: '3P1D +45%', 'C256 +20%' (colocated at budget 256;
    'C:slo' under the slo_adaptive policy), 'tie', 'none'."""
    if r["winner"] in ("none", "tie"):
        return r["winner"]
    setting = r["colocated_setting"]  # "budget 256", or a budget policy's name
    name = r["split"] if r["winner"] == "disaggregated" else (
        f"C{setting.split()[1]}" if setting.startswith("budget ") else f"C:{setting.split('_')[0]}")
    return f"{name}\n{'only one serves' if math.isinf(r['margin']) else format(r['margin'], '+.0%')}"


def winner_map(winners: pd.DataFrame, path: Path, title: str, caption: str) -> Path:
    """Rows: SLO sets; columns: workloads; each panel GPUs (y) by load (x), coloured by log2 of the best
    split's goodput per GPU over the best colocated run's (blue: the split, red: colocated)."""
    slos, workloads = list(dict.fromkeys(winners["slo"])), list(dict.fromkeys(winners["workload"]))
    loads, gpus = sorted(winners["load"].unique()), sorted(winners["gpus"].unique())
    fig, axes = plt.subplots(len(slos), len(workloads), figsize=(4.0 * len(workloads) + 1.2, 2.7 * len(slos) + 1.2),
                             squeeze=False)
    image = None
    for i, slo in enumerate(slos):
        for j, workload in enumerate(workloads):
            ax = axes[i][j]
            w = winners[(winners["slo"] == slo) & (winners["workload"] == workload)].set_index(["gpus", "load"])
            grid = np.full((len(gpus), len(loads)), np.nan)
            for a, n in enumerate(gpus):
                for b, load in enumerate(loads):
                    if (n, load) not in w.index:
                        continue
                    r = w.loc[(n, load)]
                    ratio = r["disagg_over_colocated"]
                    if min(r["colocated_share_in_slo"], r["disagg_share_in_slo"]) < OVERLOAD_SHARE:
                        label = "overload" if r["winner"] in ("tie", "none") else cell_label(r).split("\n")[0] + "\nother <10%"
                        ax.text(b, a, label, ha="center", va="center", fontsize=8, color="dimgray")
                        continue  # nan: drawn in the grey of set_bad, outside the colour scale: a ratio over a few requests
                    grid[a, b] = 0.0 if r["winner"] in ("tie", "none") or ratio != ratio else \
                        float(np.clip(np.log2(ratio) if ratio > 0 else -CLIP_LOG2, -CLIP_LOG2, CLIP_LOG2))
                    ax.text(b, a, cell_label(r), ha="center", va="center", fontsize=8,
                            color="white" if abs(grid[a, b]) > 1.0 else "black")  # legible on the dark ends
            cmap = plt.get_cmap("RdBu").copy()
            cmap.set_bad("#dddddd")
            image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-CLIP_LOG2, vmax=CLIP_LOG2, origin="lower",
                              aspect="auto")
            ax.set_xticks(range(len(loads)), [f"{x:g}" for x in loads], fontsize=7)
            ax.set_yticks(range(len(gpus)), [str(n) for n in gpus], fontsize=7)
            ax.set_title(f"{slo.removeprefix('disagg_')} | {workload}", fontsize=9)
            if i == len(slos) - 1:
                ax.set_xlabel("load (x N x single-GPU capacity)", fontsize=7)
            if j == 0:
                ax.set_ylabel("GPUs (N)", fontsize=7)
    fig.subplots_adjust(hspace=0.45, wspace=0.25)
    bar = fig.colorbar(image, ax=axes, shrink=0.6, pad=0.02)
    bar.set_label("log2(best split / best colocated goodput per GPU)", fontsize=7)
    bar.ax.tick_params(labelsize=7)
    return _save(fig, path, title, caption, tight=False)
