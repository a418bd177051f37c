"""The pipeline's plots (seaborn, PNG)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

HEADLINE = [("ttft_p50_s", "TTFT p50 (s)"), ("ttft_p95_s", "TTFT p95 (s)"), ("itl_p99_s", "ITL p99, per gap (s)"),
            ("worst_stall_s", "worst stall (s)"), ("output_tokens_per_s", "output tok/s"),
            ("goodput_req_per_s", "goodput (req/s)")]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ttft_ecdf(requests: pd.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.ecdfplot(requests, x="ttft_s", hue="budget", palette="viridis", ax=ax)
    ax.set(xlabel="TTFT (s)", title="TTFT by budget (large trace, all seeds)")
    return _save(fig, path)


def itl_distribution(requests: pd.DataFrame, path: Path) -> Path:
    gaps = [(b, float(g)) for b, s in zip(requests["budget"], requests["gaps_s"].fillna("")) for g in s.split()]
    df = pd.DataFrame(gaps, columns=["budget", "gap_s"])
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.ecdfplot(df, x="gap_s", hue="budget", palette="viridis", log_scale=True, ax=ax)
    ax.set(xlabel="inter-token gap (s, log)", title="Every inter-token gap, by budget")
    return _save(fig, path)


def timeline(tokens: pd.DataFrame, path: Path) -> Path:
    budgets = sorted(tokens["budget"].unique())
    fig, axes = plt.subplots(len(budgets), 1, figsize=(9, 2.6 * len(budgets)), sharex=True)
    colors = {"long": "tab:red", "short": "tab:blue"}
    for ax, budget in zip(axes if len(budgets) > 1 else [axes], budgets):
        run = tokens[tokens["budget"] == budget]
        for rid, req in run.groupby("request_id"):
            color = colors.get(req["label"].iloc[0], "gray")
            ax.hlines(rid, req["arrival_s"].iloc[0], req["time_s"].min(), color=color, alpha=0.3, lw=1)
            ax.plot(req["time_s"], [rid] * len(req), "|", color=color, ms=4, mew=0.6)
        ax.set(ylabel="request", title=f"budget {budget}: waiting (faint line) then one tick per token; red = 1536-token prompt")
    axes[-1].set_xlabel("time since the first arrival (s)")
    return _save(fig, path)


def prefill_split(split: pd.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.lineplot(split, x="chunk_tokens", y="median_ms", hue="attention", marker="o", ax=ax)
    ax.set(xscale="log", yscale="log", xlabel="tokens per pass (log)", ylabel="total prefill time (ms, log)",
           title="One 1536-token prefill split into passes")
    return _save(fig, path)


def metrics_vs_budget(runs: pd.DataFrame, path: Path) -> Path:
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5))
    for ax, (key, label) in zip(axes.flat, HEADLINE):
        sns.pointplot(runs, x="budget", y=key, hue="size", errorbar=("pi", 100), estimator="median",
                      dodge=0.2, ax=ax, markersize=4)
        sns.stripplot(runs, x="budget", y=key, hue="size", dodge=True, alpha=0.4, ax=ax, legend=False, size=3)
        ax.set(ylabel=label, xlabel="budget (tokens/step)")
    fig.suptitle("Headline metrics by budget: median over seeds, bars span min-max, dots are runs")
    return _save(fig, path)


def ttft_by_class(requests: pd.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.boxplot(requests, x="budget", y="ttft_s", hue="label", ax=ax, fliersize=2)
    ax.set(yscale="log", ylabel="TTFT (s, log)", xlabel="budget (tokens/step)",
           title="TTFT by prompt class: chunking taxes the chunked request")
    return _save(fig, path)


def versus_rate(runs: pd.DataFrame, path: Path, metrics: list[tuple[str, str]],
                title: str = "Against offered load, by budget") -> Path:
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.6))
    style = "workload" if "workload" in runs and runs["workload"].nunique() > 1 else None
    for ax, (key, label) in zip(axes, metrics):
        sns.lineplot(runs.sort_values("rate_per_s"), x="rate_per_s", y=key, hue="budget", style=style, marker="o",
                     ax=ax)
        ax.set(xscale="log", xlabel="arrival rate (req/s, log)", ylabel=label)
    axes[0].legend(fontsize=6)
    for ax in axes[1:]:
        ax.get_legend().remove()
    fig.suptitle(title)
    return _save(fig, path)


def fidelity(table: pd.DataFrame, path: Path) -> Path:
    """Per metric: measured median with its min-max spread (bars) and simulated (crosses), by budget."""
    metrics = list(dict.fromkeys(table["metric"]))
    budgets = sorted(table["budget"].unique())
    colors = dict(zip(budgets, sns.color_palette("viridis", len(budgets))))
    fig, axes = plt.subplots(2, -(-len(metrics) // 2), figsize=(4 * -(-len(metrics) // 2), 6.5), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for budget in budgets:
            t = table[(table["metric"] == metric) & (table["budget"] == budget)].sort_values("rate_per_s")
            err = [t["real_median"] - t["real_min"], t["real_max"] - t["real_median"]]
            ax.errorbar(t["rate_per_s"], t["real_median"], yerr=err, color=colors[budget], marker="o", ms=4,
                        capsize=3, label=f"{budget} measured")
            ax.plot(t["rate_per_s"], t["simulated"], color=colors[budget], marker="x", ms=7, ls="--",
                    label=f"{budget} simulated")
        ax.set(title=metric, xlabel="arrival rate (req/s)")
    axes.flat[0].legend(fontsize=7, title="budget")
    fig.suptitle("Fidelity: simulated (x, dashed) vs measured (median, min-max over repeats)", fontsize=10)
    return _save(fig, path)


MAP_METRICS = [("goodput_req_per_s", "goodput (req/s)", ".2f"), ("ttft_p99_s", "TTFT p99 (s)", ".2f"),
               ("itl_p99_s", "ITL p99, per gap (s)", ".3f"), ("worst_stall_s", "worst stall (s)", ".2f")]


def budget_load_heatmaps(cells: pd.DataFrame, path: Path, title: str) -> Path:
    fig, axes = plt.subplots(1, len(MAP_METRICS), figsize=(5.2 * len(MAP_METRICS), 4.6))
    for ax, (key, label, fmt) in zip(axes, MAP_METRICS):
        grid = cells.pivot(index="budget", columns="load", values=key).sort_index(ascending=False)
        sns.heatmap(grid, annot=True, fmt=fmt, annot_kws={"size": 6}, cmap="viridis_r" if key != "goodput_req_per_s"
                    else "viridis", cbar=False, ax=ax)
        ax.set(title=label, xlabel="load (x capacity)", ylabel="budget (tokens/step)")
    fig.suptitle(f"Budget x load: {title}")
    return _save(fig, path)


def best_budget(best: pd.DataFrame, cells: pd.DataFrame, path: Path) -> Path:
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    sns.lineplot(best, x="load", y="budget", hue="workload", marker="o", ax=a)
    a.set(yscale="log", ylabel="best budget (tokens/step, log)", xlabel="load (x capacity)",
          title="Budget with the highest goodput, per load")
    sns.lineplot(cells, x="load", y="goodput_req_per_s", hue="budget", style="workload", palette="viridis",
                 marker=".", ax=b)
    b.set(xlabel="load (x capacity)", ylabel="goodput (req/s)", title="Goodput by budget")
    b.legend(fontsize=6, ncol=2)
    fig.suptitle("Simulated: which budget to pick, by load")
    return _save(fig, path)


def queue_timeline(queue: pd.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(11, 4))
    for (replay, budget), q in queue.groupby(["replay", "budget"]):
        ax.plot(q["time_s"] / 60, q["waiting"], lw=0.8, label=f"{replay}, budget {budget}")
    ax.set(xlabel="trace time (min)", ylabel="requests waiting (max per bin)", yscale="symlog",
           title="Simulated: queue length over the Azure conversation trace")
    ax.legend(fontsize=7)
    return _save(fig, path)


def operator_fit(points: pd.DataFrame, path: Path, title: str) -> Path:
    """Measured and predicted time per operator against token count (log-log); held-out points hollow."""
    ops = list(dict.fromkeys(points["op"]))
    cols = 4
    rows = -(-len(ops) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        d = points[points["op"] == op].sort_values("num_tokens")
        fit, held = d[~d["held_out"]], d[d["held_out"]]
        ax.scatter(fit["num_tokens"], fit["measured_ms"], s=6, color="tab:blue", label="measured (fit)")
        ax.scatter(held["num_tokens"], held["measured_ms"], s=10, facecolors="none", edgecolors="tab:orange",
                   label="measured (held out)")
        ax.plot(d["num_tokens"], d["predicted_ms"], color="black", lw=1, label="roofline")
        ax.set(xscale="log", yscale="log", title=op, xlabel="tokens", ylabel="ms")
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)
