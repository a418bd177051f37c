"""The pipeline's plots (seaborn, PNG)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

HEADLINE = [("ttft_p50_s", "TTFT p50 (s)"), ("ttft_p95_s", "TTFT p95 (s)"), ("itl_p99_s", "ITL p99, per gap (s)"),
            ("worst_stall_s", "worst stall (s)"), ("output_tokens_per_s", "output tok/s"),
            ("goodput_req_per_s", "goodput (req/s)")]


METRIC_LABELS = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2e": "E2E latency", "goodput": "goodput"}
AFTER_LABEL = {"itl": ", per gap"}  # the ITL columns pool every token gap
UNIT_SUFFIXES = (("_req_per_s", "req/s"), ("_s", "s"))


def metric_label(key: str) -> str:
    """A metric column as an axis label: 'ttft_p50_s' -> 'TTFT p50 (s)', 'goodput_req_per_s' -> 'goodput (req/s)'."""
    unit = ""
    for suffix, name in UNIT_SUFFIXES:
        if key.endswith(suffix):
            key, unit = key[: -len(suffix)], f" ({name})"
            break
    head, _, rest = key.partition("_")
    return " ".join(filter(None, [METRIC_LABELS.get(head, head), rest.replace("_", " ")])) + AFTER_LABEL.get(head, "") + unit


def _save(fig, path: Path, title: str, caption: str, tight: bool = True) -> Path:
    """title: what the plot shows; caption: measured or simulated, the machine, the load or rate
    (every figure says them, so a PNG read alone is never another machine's numbers). tight=False: the
    figure laid out its own axes (a colorbar shared by a grid of axes)."""
    width = int(fig.get_figwidth() * 15)  # characters of a 9-point line across the figure
    lines = [title, *textwrap.wrap(caption, width)] if caption else [title]
    fig.suptitle("\n".join(lines), fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    if tight:
        fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the canvas grows to hold a legend outside the axes
    plt.close(fig)
    return path


def budget_hue(frame: pd.DataFrame, column: str = "budget") -> tuple[pd.DataFrame, list[str], dict[str, tuple]]:
    """Budgets as categories (distinct colours, numeric order): the frame with a `budget_label`
    column, the order, and the palette."""
    order = [str(b) for b in sorted(frame[column].unique())]
    palette = dict(zip(order, sns.color_palette("colorblind", len(order))))
    return frame.assign(budget_label=frame[column].astype(str)), order, palette


def _legend_outside(ax, title: str = "") -> None:
    """The legend right of the axes, never over the data."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles and ax.get_legend() is not None:  # seaborn's distribution plots keep theirs off the axes' handles
        sns.move_legend(ax, "upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, title=title or None,
                        fontsize=7, title_fontsize=7)
        return
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    ax.legend(handles, labels, title=title or None, fontsize=7, title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


def ttft_ecdf(requests: pd.DataFrame, path: Path, caption: str = "") -> Path:
    frame, order, palette = budget_hue(requests)
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.ecdfplot(frame, x="ttft_s", hue="budget_label", hue_order=order, palette=palette, ax=ax)
    ax.set(xlabel="TTFT (s)")
    _legend_outside(ax, "budget")
    return _save(fig, path, "TTFT by budget (every request of every run)", caption)


def itl_distribution(requests: pd.DataFrame, path: Path, caption: str = "") -> Path:
    gaps = [(b, float(g)) for b, s in zip(requests["budget"], requests["gaps_s"].fillna("")) for g in s.split()]
    frame, order, palette = budget_hue(pd.DataFrame(gaps, columns=["budget", "gap_s"]))
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.ecdfplot(frame, x="gap_s", hue="budget_label", hue_order=order, palette=palette, log_scale=True, ax=ax)
    ax.set(xlabel="inter-token gap (s, log)")
    _legend_outside(ax, "budget")
    return _save(fig, path, "Every inter-token gap, by budget", caption)


def timeline(tokens: pd.DataFrame, path: Path, caption: str = "") -> Path:
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
    return _save(fig, path, "The chapter's trace, request by request", caption)


def prefill_split(split: pd.DataFrame, path: Path, caption: str = "", chapter_ms: dict[int, float] | None = None) -> Path:
    """chapter_ms: passes -> the chapter's published total (its own engine and machine), drawn beside ours."""
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.lineplot(split, x="chunk_tokens", y="median_ms", hue="attention", marker="o", ax=ax)
    if chapter_ms:
        prompt_tokens = int((split["chunk_tokens"] * split["passes"]).iloc[0])
        ax.scatter([prompt_tokens // p for p in chapter_ms], list(chapter_ms.values()), marker="X", s=60,
                   color="black", zorder=3, label="the chapter (its engine)")
    ax.set(xscale="log", yscale="log", xlabel="tokens per pass (log)", ylabel="total prefill time (ms, log)")
    _legend_outside(ax, "attention")
    return _save(fig, path, "One 1536-token prefill split into passes", caption)


def seed_medians(runs: pd.DataFrame, hue: str, x: str, keys: list[str]) -> pd.DataFrame:
    """Per (hue, seed, x): the median of the seed's repeats. Seeds stay apart (each a line)."""
    return runs.groupby([hue, "seed", x], sort=True, observed=True)[keys].median().reset_index()


def metrics_vs_budget(runs: pd.DataFrame, path: Path, hue: str = "size", caption: str = "") -> Path:
    """hue: the column that splits the runs (the chapter's trace sizes, or loads). One line per (hue, seed):
    a seed is one draw of arrivals and prompts, the same at every budget, so a line compares budgets on the
    same requests; its point is the median of that seed's repeats, the dots each run. Seeds are never pooled
    into one bar: that would show the spread of arrival draws, not of budgets."""
    budgets = sorted(runs["budget"].unique())
    runs = runs.assign(budget_label=pd.Categorical(runs["budget"].astype(int).astype(str),
                                                   [str(int(b)) for b in budgets], ordered=True))
    per_seed = seed_medians(runs, hue, "budget_label", [key for key, _ in HEADLINE])
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (key, label) in zip(axes.flat, HEADLINE):
        sns.lineplot(per_seed, x="budget_label", y=key, hue=hue, units="seed", estimator=None, marker="o",
                     linewidth=1.2, markersize=5, ax=ax)
        sns.scatterplot(runs, x="budget_label", y=key, hue=hue, alpha=0.35, s=12, ax=ax, legend=False)
        ax.set(ylabel=label, xlabel="budget (tokens/step)")
        ax.get_legend().remove()
    _legend_outside(axes.flat[2], hue)
    return _save(fig, path, "Headline metrics by budget: a line per seed (the same requests at every budget), "
                            "its points the median of the seed's repeats, dots each run", caption)


def ttft_by_class(requests: pd.DataFrame, path: Path, caption: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    sns.boxplot(requests, x="budget", y="ttft_s", hue="label", ax=ax, fliersize=2)
    ax.set(yscale="log", ylabel="TTFT (s, log)", xlabel="budget (tokens/step)")
    _legend_outside(ax, "prompt class")
    return _save(fig, path, "TTFT by prompt class, by budget", caption)


def versus_rate(runs: pd.DataFrame, path: Path, metrics: list[tuple[str, str]], title: str, caption: str = "",
                hue: str = "budget") -> Path:
    """One panel per workload and metric, the hue's lines against the arrival rate."""
    workloads = list(dict.fromkeys(runs["workload"])) if "workload" in runs else [None]
    fig, axes = plt.subplots(len(workloads), len(metrics), figsize=(5 * len(metrics) + 2.5, 3.4 * len(workloads)),
                             squeeze=False)
    order = list(dict.fromkeys(runs.sort_values(hue, key=lambda c: c.astype(str))[hue].astype(str)))
    palette = dict(zip(order, sns.color_palette("colorblind", len(order))))
    for row, workload in zip(axes, workloads):
        part = runs if workload is None else runs[runs["workload"] == workload]
        for ax, (key, label) in zip(row, metrics):
            # a dash and a marker per line as well as a colour: settings that coincide stay visible
            sns.lineplot(part.assign(**{hue: part[hue].astype(str)}).sort_values("rate_per_s"), x="rate_per_s",
                         y=key, hue=hue, hue_order=order, palette=palette, style=hue, style_order=order,
                         markers=True, dashes=True, ms=5, ax=ax)
            ax.set(xlabel="arrival rate (req/s)", ylabel=label, title=workload or "")
            ax.get_legend().remove()
        shown = set(part[hue].astype(str))  # a row's legend names its own settings only (each workload's tuned one)
        handles, labels = row[-1].get_legend_handles_labels()
        row[-1].legend(*zip(*[(h, lab) for h, lab in zip(handles, labels) if lab in shown]), title=hue, fontsize=7,
                       title_fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    return _save(fig, path, title, caption)


def fidelity(table: pd.DataFrame, path: Path, caption: str = "") -> Path:
    """Per metric: measured median with its min-max spread (bars) and simulated (crosses), by budget."""
    metrics = list(dict.fromkeys(table["metric"]))
    budgets = sorted(table["budget"].unique())
    colors = dict(zip(budgets, sns.color_palette("colorblind", len(budgets))))
    fig, axes = plt.subplots(2, -(-len(metrics) // 2), figsize=(4 * -(-len(metrics) // 2), 6.5), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for budget in budgets:
            t = table[(table["metric"] == metric) & (table["budget"] == budget)].sort_values("rate_per_s")
            err = [t["real_median"] - t["real_min"], t["real_max"] - t["real_median"]]
            ax.errorbar(t["rate_per_s"], t["real_median"], yerr=err, color=colors[budget], marker="o", ms=4,
                        capsize=3, label=f"{budget} measured")
            ax.plot(t["rate_per_s"], t["simulated"], color=colors[budget], marker="x", ms=7, ls="--",
                    label=f"{budget} simulated")
        ax.set(title=metric_label(metric), ylabel=metric_label(metric), xlabel="arrival rate (req/s)")
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    _legend_outside(axes[0][-1], "budget")
    return _save(fig, path, "Fidelity: simulated (x, dashed) vs measured (median, min-max over repeats)", caption)


MAP_METRICS = [("goodput_req_per_s", "goodput (req/s)", ".2f"), ("ttft_p99_s", "TTFT p99 (s)", ".2f"),
               ("itl_p99_s", "ITL p99, per gap (s)", ".3f"), ("worst_stall_s", "worst stall (s)", ".2f")]


def budget_load_heatmaps(cells: pd.DataFrame, path: Path, title: str, caption: str = "") -> Path:
    """Two by two: one heatmap per metric, each cell's number legible at the size REPORT.md shows."""
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for ax, (key, label, fmt) in zip(axes.flat, MAP_METRICS):
        grid = cells.pivot(index="budget", columns="load", values=key).sort_index(ascending=False)
        sns.heatmap(grid, annot=True, fmt=fmt, annot_kws={"size": 9}, cmap="viridis_r" if key != "goodput_req_per_s"
                    else "viridis", cbar=False, ax=ax)
        ax.set(title=label, xlabel="load (x capacity)", ylabel="budget (tokens/step)")
    return _save(fig, path, f"Budget x load: {title}", caption)


def best_budget(best: pd.DataFrame, cells: pd.DataFrame, path: Path, caption: str = "") -> Path:
    """Left: the best budget per load and workload, hollow where several budgets tie at the best goodput
    (the tie-break, the lower TTFT p99, picked it); right: goodput per budget (only budgets that ran)."""
    workloads = list(dict.fromkeys(cells["workload"]))
    fig, axes = plt.subplots(1, 1 + len(workloads), figsize=(5.5 * (1 + len(workloads)) + 2, 4.5))
    top = cells.groupby(["workload", "load"])["goodput_req_per_s"].transform("max")
    tied = (cells[cells["goodput_req_per_s"] >= top * (1 - 1e-9)].groupby(["workload", "load"]).size() > 1)
    markers = dict(zip(workloads, "oX^s"))
    colors = dict(zip(workloads, sns.color_palette("dark", len(workloads))))
    ax = axes[0]
    for i, workload in enumerate(workloads):
        w = best[best["workload"] == workload].sort_values("load")
        ties = w.apply(lambda r: bool(tied.get((workload, r["load"]), False)), axis=1)
        ax.plot(w["load"], w["budget"], color=colors[workload], lw=1.2, ls="-" if i == 0 else "--", zorder=1)
        ax.scatter(w["load"], w["budget"], marker=markers[workload], s=70 - 30 * i, zorder=2,
                   facecolors=[("none" if t else colors[workload]) for t in ties], edgecolors=colors[workload],
                   label=workload)
    budgets = sorted(cells["budget"].unique())
    ax.set(yscale="log", ylabel="best budget (tokens/step, log)", xlabel="load (x capacity)",
           title="Budget with the highest goodput\n(hollow: budgets tie, the TTFT p99 tie-break picked it)")
    ax.set_yticks(budgets, [str(b) for b in budgets])
    ax.minorticks_off()
    ax.legend(fontsize=8, title="workload", title_fontsize=8)
    frame, order, palette = budget_hue(cells)
    dashes = dict(zip(order, ["", (4, 2), (1, 1), (6, 2, 1, 2)] * 4))
    for ax, workload in zip(axes[1:], workloads):
        sns.lineplot(frame[frame["workload"] == workload], x="load", y="goodput_req_per_s", hue="budget_label",
                     hue_order=order, palette=palette, style="budget_label", style_order=order, dashes=dashes,
                     markers=True, ms=6, lw=1.6, ax=ax)
        ax.set(xlabel="load (x capacity)", ylabel="goodput (req/s)", title=f"goodput by budget: {workload}")
        ax.get_legend().remove()
    _legend_outside(axes[-1], "budget")
    return _save(fig, path, "Which budget to pick, by load", caption)


def queue_timeline(queue: pd.DataFrame, path: Path, caption: str = "") -> Path:
    """One panel per replay (real time, compressed) and budget, stacked on one time axis and one scale:
    the budgets' queues over the same trace, side by side rather than drawn over each other."""
    frame, order, palette = budget_hue(queue)
    panels = [(replay, label) for replay in dict.fromkeys(frame["replay"]) for label in order
              if ((frame["replay"] == replay) & (frame["budget_label"] == label)).any()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 1.25 * len(panels) + 0.6), squeeze=False, sharex=True,
                             sharey=True)
    times = sorted(queue["time_s"].unique())
    bin_s = times[1] - times[0] if len(times) > 1 else 0.0
    for ax, (replay, label) in zip(axes[:, 0], panels):
        q = frame[(frame["replay"] == replay) & (frame["budget_label"] == label)]
        ax.fill_between(q["time_s"] / 60, q["waiting"], step="post", color=palette[label], alpha=0.8, lw=0)
        ax.set_ylabel(f"budget {label}\n{replay}", rotation=0, ha="right", va="center", fontsize=8)
        ax.tick_params(labelsize=8)
    axes[-1, 0].set_xlabel("trace time (min)")
    return _save(fig, path, f"Requests waiting (the most in each {bin_s:g} s) over the Azure conversation trace, one "
                            "panel per budget and replay", caption)


def operator_fit(points: pd.DataFrame, path: Path, title: str, caption: str = "") -> Path:
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
        # one tick per point: several shapes share a token count, and a line through them draws false spikes
        ax.plot(d["num_tokens"], d["predicted_ms"], color="black", ls="none", marker="_", ms=7, label="roofline")
        ax.set(xscale="log", yscale="log", title=op, xlabel="tokens", ylabel="ms")
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return _save(fig, path, title, caption)
