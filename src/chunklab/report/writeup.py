"""outputs/REPORT.md: the tables and plots with what they show, in numbers."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from chunklab.report import chapter
from chunklab.report.tables import narrow_markdown
from chunklab.experiments.slo import describe
from chunklab.report.claim_text import (CLAIMS_HEADING, all_verdicts, capacity_table, claim_findings, grid_requests,
                                        grid_runs, measured_capacity, scored_slos)
from chunklab.report.claims import HOLDS, split_verdicts
from chunklab.report.budget_policy import HEADING as POLICY_HEADING, budget_policy_section, budget_policy_summary
from chunklab.report.share import HEADING as SHARE_HEADING, share_section, share_summary
from chunklab.report.summary import anchor, summary
from chunklab.report.capacity import HEADING as CAPACITY_HEADING, capacity_floor, capacity_section, grid_capacity
from chunklab.report.topologies import cluster_findings
from chunklab.report.disagg_text import disagg_section
from chunklab.report.peer import peer_findings
from chunklab.report.production import production_findings


def _med(runs: pd.DataFrame, size: str, budget: int, key: str) -> float:
    """Median at the chapter's fixed rate (the first intensity) over that size's runs."""
    sel = runs[(runs["size"] == size) & (runs["budget"] == budget) & (runs["intensity"] == runs["intensity"].iloc[0])]
    return float(sel[key].median())


def prefill_findings(split: pd.DataFrame) -> list[str]:
    ms = {(r.attention, r.passes): r.median_ms for r in split.itertuples()}
    out = []
    for impl in ("paged", "sdpa", "naive"):
        if (impl, 1) in ms and (impl, 24) in ms:
            one, many = ms[(impl, 1)], ms[(impl, 24)]
            out.append(f"- `{impl}`: 1 x 1536 takes {one:.1f} ms, 24 x 64 takes {many:.1f} ms "
                       f"({many / one:.2f}x the one-pass time).")
    c = chapter.PREFILL_SPLIT_MS
    out.append(f"- The chapter: 1 x 1536 = {c[1]} ms, 24 x 64 = {c[24]} ms ({c[24] / c[1]:.2f}x); its one-pass "
               "prefill materialised the 1536 x 1536 score matrix, as our `naive` path does.")
    verdicts = {v.attention: v.verdict for v in split_verdicts(split).itertuples()}
    faster = sorted(k for k, v in verdicts.items() if v == HOLDS)
    if faster:
        out.append(f"- Splitting is faster than one pass here for: {', '.join(f'`{k}`' for k in faster)}; "
                   f"not for the others measured ({', '.join(f'`{k}`: {v}' for k, v in verdicts.items() if v != HOLDS)}).")
    return out


def split_cost_note(split: pd.DataFrame, outputs: Path) -> list[str]:
    """Why the perf stage's chunking cost differs from the table's: two estimators of one ratio, named apart."""
    perf = outputs / "perf.csv"
    ms = {(r.attention, r.passes): r.median_ms for r in split.itertuples()}
    if not perf.is_file() or ("paged", 1) not in ms or ("paged", 24) not in ms:
        return []
    row = pd.read_csv(perf).set_index("metric").loc["chunking_cost_24x64_vs_1x1536"]
    paired = float(row["after (probed linear, paged prefill)"])
    return [f"- The 24 x 64 cost of the `paged` path has two estimates: {ms[('paged', 24)] / ms[('paged', 1)]:.2f}x here "
            "(the ratio of each split's median over runs taken one split after the other) and "
            f"{paired:.3f}x in the perf stage (the median of ratios within rounds that alternate the two, so the "
            "machine's drift between runs cancels; the perf goal is judged on it)."]


def budget_findings(runs: pd.DataFrame, size: str) -> list[str]:
    """The numbers at the chapter's rate, smallest budget against largest: the medians the repeats table
    above prints (the repeated seed's runs), so that each quantity has one value in the report."""
    sel = runs[runs["size"] == size]
    runs = sel[sel["seed"] == sel["seed"].min()]  # as make_tables' token_budget_large
    budgets = sorted(runs["budget"].unique())
    lo, hi = budgets[0], budgets[-1]
    m = lambda b, k: _med(runs, size, b, k)  # noqa: E731
    return [
        f"- Medians over the repeats above (seed {int(runs['seed'].min())}): TTFT p50 {m(hi, 'ttft_p50_s'):.3f} s at budget {hi}, "
        f"{m(lo, 'ttft_p50_s'):.3f} s at budget {lo}; output throughput {m(hi, 'output_tokens_per_s'):.0f} and "
        f"{m(lo, 'output_tokens_per_s'):.0f} tok/s; goodput {m(hi, 'goodput_req_per_s'):.3f} and "
        f"{m(lo, 'goodput_req_per_s'):.3f} req/s; worst stall {1e3 * m(hi, 'worst_stall_s'):.0f} and "
        f"{1e3 * m(lo, 'worst_stall_s'):.0f} ms; per-gap ITL p99 {1e3 * m(hi, 'itl_p99_s'):.0f} and "
        f"{1e3 * m(lo, 'itl_p99_s'):.0f} ms; long-prompt TTFT p50 {m(hi, 'class_long_ttft_p50_s'):.3f} and "
        f"{m(lo, 'class_long_ttft_p50_s'):.3f} s; short-prompt TTFT p50 {m(hi, 'class_short_ttft_p50_s'):.3f} and "
        f"{m(lo, 'class_short_ttft_p50_s'):.3f} s.",
        f"- What the chapter called ITL p50 (the median of per-request mean gaps, TPOT p50 here) is "
        f"{1e3 * m(hi, 'tpot_p50_s'):.1f} ms at {hi} and {1e3 * m(lo, 'tpot_p50_s'):.1f} ms at {lo}; the true "
        f"per-gap p50 is {1e3 * m(hi, 'itl_p50_s'):.1f} / {1e3 * m(lo, 'itl_p50_s'):.1f} ms.",
    ]


def comparison(runs: pd.DataFrame) -> str:
    rows = ["| Budget | Chapter tok/s | Ours tok/s | Ratio | Chapter TTFT p50 (s) | Ours TTFT p50 (s) "
            "| Chapter goodput | Ours goodput |", "|---|---|---|---|---|---|---|---|"]
    for b, ref in chapter.TOKEN_BUDGET.items():
        if b in set(runs[runs["size"] == "small"]["budget"]):
            m = lambda k: _med(runs, "small", b, k)  # noqa: E731
            rows.append(f"| {b} | {ref['output_tokens_per_s']:.1f} | {m('output_tokens_per_s'):.1f} | "
                        f"{m('output_tokens_per_s') / ref['output_tokens_per_s']:.1f}x | {ref['ttft_p50_s']:.3f} | "
                        f"{m('ttft_p50_s'):.3f} | {ref['goodput_req_per_s']:.3f} | {m('goodput_req_per_s'):.3f} |")
    return "\n".join(rows)


def differences(runs: pd.DataFrame, capacity: float | None) -> list[str]:
    out = []
    for size in ("small", "large"):
        sel = runs[(runs["size"] == size) & (runs["intensity"] == runs["intensity"].iloc[0])]
        by_budget = sel.groupby("budget")
        goodput = by_budget["goodput_req_per_s"].median()
        attain = by_budget["slo_attainment"].median()
        n = int(sel["num_requests"].iloc[0])
        best = int(goodput.idxmax())
        out.append(f"- {n} requests: the best median goodput is at budget {best} ({goodput[best]:.3f} req/s); "
                   "SLO attainment by budget: " + ", ".join(f"{b}: {100 * a:.0f}%" for b, a in attain.items()) + ".")
    rate = float(runs["rate_per_s"].iloc[0])
    best_chapter = max(ref["goodput_req_per_s"] for ref in chapter.TOKEN_BUDGET.values())
    if capacity is None:
        load = "this repro has no measured capacity to say how loaded the engine is at the chapter's rate"
    elif rate < capacity:
        load = (f"at {rate:g} requests/s this engine runs at {rate / capacity:.2f} of its measured capacity "
                f"({capacity:.2f} req/s), so its output rate is the arrival rate times the output length at every "
                f"budget, not a measure of its speed; the chapter's engine served at most {best_chapter:.3f} req/s "
                f"of goodput out of the same {rate:g} offered")
    else:
        load = (f"at {rate:g} requests/s this engine is at {rate / capacity:.2f} of its measured capacity "
                f"({capacity:.2f} req/s): past it, as the chapter's was (its best goodput {best_chapter:.3f} req/s "
                f"of {rate:g} offered), so its TTFTs are queueing")
    out.append(f"- Why the numbers differ from the chapter's: {load}. Our arrivals are stamped at their trace time (the "
               "chapter's harness stamped them after a long step), our ITL covers every gap rather than one mean per "
               "request, and each cell is a median over seeds with its min-max spread: at 24 requests the spread is "
               "often wider than the differences between budgets, which a single run cannot show.")
    return out


def tuning_findings(outputs: Path) -> list[str]:
    path = outputs / "simulated" / "tuning" / "trials.csv"
    if not path.is_file():
        return []
    trials = pd.read_csv(path)
    out = []
    for workload, t in trials.groupby("workload"):
        best = t.loc[t["goodput_req_per_s"].idxmax()]
        out.append(f"- `{workload}`: goodput over {len(t)} trials spans {t['goodput_req_per_s'].min():.2f}-"
                   f"{t['goodput_req_per_s'].max():.2f} req/s (max/min {t['goodput_req_per_s'].max() / t['goodput_req_per_s'].min():.2f}x); "
                   f"best: budget {best['budget']} ({best['budget_policy']}), max_partial_prefills "
                   f"{best['max_partial_prefills']}, "
                   f"long_prefill_threshold {best['long_prefill_threshold']}, {best['ordering']}.")
    out.append("- Whether the scheduler matters depends on the workload: the spread above is the simulated size of "
               "that dependence (exact for the profile; the fidelity section says how far the profile is from the "
               "real engine).")
    return out


def map_findings(outputs: Path) -> list[str]:
    best = pd.read_csv(outputs / "simulated" / "maps" / "best_budget.csv")
    out = []
    for workload, b in best.groupby("workload"):
        def tied(r) -> str:
            others = str(r.ties).split() if "ties" in b and isinstance(r.ties, str) else []
            return f" (tied with {len(others)})" if others else " (decided)"
        pairs = ", ".join(f"{r.load:g}: {r.budget}{tied(r)}" for r in b.itertuples())
        out.append(f"- `{workload}`, best budget by load (x capacity), and how many other budgets the paired rule "
                   f"cannot tell below it: {pairs}.")
    return out


def fidelity_findings(outputs: Path) -> list[str]:
    t = pd.read_csv(outputs / "fidelity" / "fidelity.csv")
    paired = pd.read_csv(outputs / "fidelity" / "paired.csv")
    worst = t.sort_values("rel_error", ascending=False).iloc[0]
    worst_pair = paired.sort_values("median_rel_error", ascending=False).iloc[0]
    return [f"- Per request (paired by id): median error {100 * paired['median_rel_error'].min():.1f}-"
            f"{100 * paired['median_rel_error'].max():.1f}% over every point and metric; the worst is "
            f"{worst_pair['metric']} at {worst_pair['point']} (median {100 * worst_pair['median_rel_error']:.1f}%, "
            f"p90 {100 * worst_pair['p90_rel_error']:.1f}%).",
            f"- Percentiles: {100 * t['met'].mean():.0f}% of the {len(t)} (metric, point) rows meet their goal "
            f"(p50s and goodput within 5% of the measured median, p95/p99 within 9%, or inside the repeats' "
            f"min-max); the worst is {worst['metric']} at {worst['point']}: simulated {worst['simulated']:.4g} "
            f"vs measured {worst['real_median']:.4g} [{worst['real_min']:.4g}-{worst['real_max']:.4g}] "
            f"({100 * worst['rel_error']:.0f}% off)."]


def repro_cpu(outputs: Path) -> str:
    """The CPU that calibrated this repro's profile (outputs/profiles/machine.json), '' without one."""
    path = outputs / "profiles" / "machine.json"
    return json.loads(path.read_text())["fingerprint"]["cpu_model"] if path.is_file() else ""


def other_machine(table_md: str, cpu_model: str, simulated: bool = False) -> list[str]:
    """A table whose conditions do not name the CPU that calibrated this repro came from a stage not
    rerun on it (measured), or from another machine's profile (simulated): one line says so beside the
    table (never one machine's numbers silently beside another's). CPUs are named with
    family/model/stepping and ISA, so two EPYCs differ."""
    if not cpu_model or cpu_model in table_md:
        return []
    if simulated:
        return [f"**Simulated for another machine.** These conditions do not name this repro's CPU ({cpu_model}, "
                "outputs/profiles/machine.json): the stage predicted another machine's profile, so its numbers "
                "describe that machine, not the one of the measured tables."]
    return [f"**Measured on another machine.** These conditions do not name this repro's CPU ({cpu_model}, "
            "outputs/profiles/machine.json): the stage was not rerun on it, so its numbers are not comparable "
            "with the measured tables that name it."]




def slo_section(outputs: Path) -> list[str]:
    """Every SLO the measured requests are scored under, in seconds on this machine, with its rule."""
    slos = scored_slos(outputs)
    if not slos:
        return []
    rows = [{"SLO": f"`{name}`", "TTFT (ms)": _ms(b["1"].ttft_s), "mean gap (ms)": _ms(b["1"].tpot_s),
             "p99 gap (ms)": _ms(b["1"].itl_p99_s),
             "rule": describe(b["1"]) if b["1"].ttft_prefill_multiple or b["1"].tpot_decode_multiple
             or b["1"].itl_p99_decode_multiple else "absolute (conf/slo/)"} for name, b in slos.items()]
    return ["## SLOs, scaled to this machine",
            "An SLO in seconds belongs to the engine that set it: the chapter's (TTFT 1 s, mean gap 50 ms) sat at its "
            "engine's edge (a 1304 ms one-pass prefill, a 35.6 ms ITL p50), and is 40-70x looser than this engine's "
            "token gap. A scaled SLO gives multiples of this machine's own step times, from its profile: the "
            "one-pass prefill of the workload's longest prompt, and a decode step at full batch with every row at "
            "the longest request's context (experiments/slo.py, conf/slo/*_scaled.yaml). Every measured request "
            "is scored under each after its run, and each verdict on an SLO is repeated with its multiples "
            "halved and doubled.", pd.DataFrame(rows).to_markdown(index=False)]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.1f}"


def measured_capacity_table(outputs: Path) -> pd.DataFrame:
    """Capacity per budget and SLO on the load grid (report/capacity.py), empty without the grid."""
    grid = grid_requests(outputs)
    return grid_capacity(grid, scored_slos(outputs)) if not grid.empty else pd.DataFrame()


def capacity_findings(outputs: Path) -> list[str]:
    grid = grid_requests(outputs)
    if grid.empty:
        return []
    loads = grid.groupby("rate_per_s")["load"].first().to_dict()
    return capacity_section(grid_capacity(grid, scored_slos(outputs)), capacity_table(outputs), loads)


def top_summary(split: pd.DataFrame, outputs: Path, cpu_model: str) -> list[str]:
    """report/summary.py's lines from this repro's measured outputs."""
    verdicts = all_verdicts(split, outputs)
    slos = scored_slos(outputs)
    runs = grid_runs(outputs)
    step_share = (runs.groupby(["load", "budget"], sort=False)["prefill_step_share"].median()
                  .rename("share").reset_index() if not runs.empty else pd.DataFrame())
    ms = {(r.attention, r.passes): r.median_ms for r in split.itertuples()}
    ratio = ms[("paged", 24)] / ms[("paged", 1)] if ("paged", 1) in ms and ("paged", 24) in ms else None
    cap = measured_capacity_table(outputs)
    return summary(cpu_model or "this machine", {name: describe(b["1"]) for name, b in slos.items()}, verdicts,
                   cap, step_share, ratio,
                   share_summary(outputs, anchor(SHARE_HEADING)) + budget_policy_summary(outputs, anchor(POLICY_HEADING)),
                   {"claims": anchor(CLAIMS_HEADING), "capacity": anchor(CAPACITY_HEADING)},
                   capacity_floor(cap, capacity_table(outputs)))


def report(split, runs, requests, tokens, split_cond, tb_cond, outputs: Path) -> str:
    cpu_model = repro_cpu(outputs)

    def t(name: str) -> str:  # a stage's table, its headings under the report's sections (### and below)
        return re.sub(r"^#{1,2} ", "### ", (outputs / "tables" / f"{name}.md").read_text(), flags=re.M)

    def m(name: str) -> list[str]:  # a measured table, and a line beside it if another machine measured it
        md = t(name)
        return [md, *other_machine(md, cpu_model)]

    def sim(name: str, profiled: bool = True) -> str:
        """A simulated table; profiled (the CPU profile, not a GPU preset): a line if of another machine's."""
        md = (outputs / "simulated" / "tables" / f"{name}.md").read_text()
        return "\n\n".join([md, *other_machine(md, cpu_model, simulated=True)]) if profiled else md

    parts = [
        "# Chunked prefill and the token budget, reproduced",
        "\n".join(top_summary(split, outputs, cpu_model)),
        "Generated by `dvc repro` (stage `report`). Two kinds of numbers, always labelled: **MEASURED** "
        "tables come from the real engine on the machine that ran the stage (conditions and noise given "
        "with them; another machine gives other numbers); **SIMULATED** tables come from the same "
        "scheduler driven by this repro's step-cost profile of the same machine (outputs/profiles/machine.json) and reproduce "
        "byte for byte anywhere. How far simulated is from measured is itself measured (Fidelity).",
        *slo_section(outputs),
        "## Prefill split (measured)", *m("prefill_split"), *prefill_findings(split), *split_cost_note(split, outputs),
        "![prefill split](plots/prefill_split.png)",
        "## Token budget (measured)", *m("token_budget_large"),
        *budget_findings(runs, "large"), *m("token_budget_loads"), "![budget by load](plots/budget_by_load.png)",
        *claim_findings(runs, split, outputs),
        *m("token_budget_small"), t("token_budget_chapter"),
        "### Where we differ from the chapter, and why",
        "The chapter's 24-request trace (seed medians) against its published run:",
        comparison(runs),
        *differences(runs, measured_capacity(outputs)),
        *share_section(outputs),
        *budget_policy_section(outputs),
        "## Fidelity: simulated against measured", *m("fidelity"), *fidelity_findings(outputs),
        "![fidelity](plots/fidelity.png)",
        "## Two cores, three ways: one engine, two replicas, prefill/decode (measured, and simulated twins)",
        *(m("topologies") if (outputs / "tables" / "topologies.md").is_file() else []), *cluster_findings(outputs),
        "## Capacity (measured, and simulated with this machine's profile)", *capacity_findings(outputs),
        *m("capacity"),
        sim("capacity"),
        "![goodput vs rate](plots/simulated/goodput_vs_rate.png)",
        "## Which budget, at which load (simulated)", sim("maps"), *map_findings(outputs),
        "![best budget](plots/simulated/best_budget.png)",
        "![ch10 heatmaps](plots/simulated/ch10_mixed_heatmaps.png)",
        "![short prompts heatmaps](plots/simulated/short_prompts_heatmaps.png)",
        "## A real trace end to end (simulated)", sim("traces"), "![queue](plots/simulated/queue.png)",
        "## Tuning (simulated)", sim("tuning"), *tuning_findings(outputs),
        "## The chapter's claim at production scale (simulated)",
        "The chapter closes on prompts of thousands of tokens arriving into a pool of hundreds of conversations. "
        "Here the same scheduler serves Llama-3-8B on an H100 and Mistral-NeMo-12B on an A100 (SIMULATED, the "
        "roofline cost model of each spec sheet; docs/production-scale.md).",
        *production_findings(outputs), sim("production", profiled=False),
        "![Llama-3-8B on H100, ch10 mix at production lengths](plots/simulated/production_llama3_8b_h100_ch10_production_heatmaps.png)",
        "![Llama-3-8B on H100, conversation trace](plots/simulated/production_llama3_8b_h100_azure_conv_heatmaps.png)",
        "### The cost model behind it", (outputs / "cost_models" / "cost_models.md").read_text(),
        *(f"![{f.stem.removesuffix('_fit').upper()} operator fit](plots/cost_models/{f.name})"
          for f in sorted((outputs / "plots" / "cost_models").glob("*_fit.png"))),
        *disagg_section(outputs),
        "## Performance (measured)", *m("perf"), *peer_findings(outputs),
        *(m("clocks") if (outputs / "tables" / "clocks.md").is_file() else []),
        "## Plots (measured)",
        "![TTFT ECDF](plots/ttft_ecdf.png)", "![ITL distribution](plots/itl_distribution.png)",
        "![timeline](plots/timeline.png)", "![metrics vs budget](plots/metrics_vs_budget.png)",
        "![TTFT by class](plots/ttft_by_class.png)",
    ]
    return narrow_markdown("\n\n".join(parts)) + "\n"
