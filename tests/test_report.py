"""REPORT.md's writeup: a measured table from another machine never sits silently beside this one's, and
the chapter's claims get the verdict the measured table decides."""
import json
from pathlib import Path

import pandas as pd

from chunklab.report.claims import FAILS, HOLDS, NA, NOISE, budget_verdicts, decide, split_verdicts, where_key
from chunklab.report.claim_text import chapter_metrics, claim_findings
from chunklab.report.writeup import other_machine, repro_cpu

ZEN5 = "AMD EPYC (family 26 model 2 stepping 0, avx512, L2 1024 KiB, L3 32 MiB)"
AVX2 = "AMD EPYC (family 23 model 1 stepping 2, avx2, L2 512 KiB, L3 8 MiB)"


def table(cpu: str) -> str:
    return f"| a | b |\n|---|---|\n| 1 | 2 |\n\nConditions: tiny_gpt, 2x x86_64 CPU ({cpu}), device cpu, 2 threads"


def test_a_table_measured_on_the_repro_cpu_needs_no_line():
    assert other_machine(table(AVX2), AVX2) == []


def test_a_table_from_another_cpu_is_flagged_naming_this_one():
    (line,) = other_machine(table(ZEN5), AVX2)
    assert "another machine" in line and AVX2 in line


def test_two_cpus_sold_under_one_name_are_told_apart():
    """A table written before CPUs carried family/model names only 'AMD EPYC': not this repro's."""
    assert other_machine(table("AMD EPYC"), AVX2) != []


def test_the_repro_cpu_is_the_calibrated_profile_s(tmp_path):
    assert repro_cpu(tmp_path) == ""  # no profile: nothing to compare against, nothing flagged
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "machine.json").write_text(json.dumps({"fingerprint": {"cpu_model": AVX2}}))
    assert repro_cpu(tmp_path) == AVX2
    assert other_machine(table(ZEN5), repro_cpu(tmp_path)) != []


# -- the chapter's claims, decided by the data (report/claims.py)

def runs_table(stall_64, stall_8192, goodput_64=(5.0, 5.1, 5.2), goodput_8192=(9.0, 9.1, 9.2)) -> pd.DataFrame:
    rows = []
    for budget, stalls, goodputs in ((64, stall_64, goodput_64), (8192, stall_8192, goodput_8192)):
        for stall, goodput in zip(stalls, goodputs):
            rows.append({"load": "load 0.85", "budget": budget, "worst_stall_s": stall, "itl_p50_s": 0.002,
                         "class_long_ttft_p50_s": 0.5, "goodput_req_per_s": goodput})
    return pd.DataFrame(rows)


def verdict(table: pd.DataFrame, claim_start: str) -> str:
    v = budget_verdicts(table)
    return v[v["claim"].str.startswith(claim_start)]["verdict"].item()


def test_a_claim_the_data_contradict_is_reported_as_not_holding():
    """A table where the smaller budget's worst stall is the larger one: the chapter's claim fails."""
    assert verdict(runs_table((0.30, 0.31, 0.32), (0.10, 0.11, 0.12)), "the worst stall") == FAILS
    assert verdict(runs_table((0.01, 0.02, 0.02), (0.10, 0.11, 0.12)), "the worst stall") == HOLDS
    assert verdict(runs_table((0.05, 0.10, 0.15), (0.10, 0.11, 0.12)), "the worst stall") == NOISE
    assert verdict(runs_table((0.01, 0.02, 0.02), (0.10, 0.11, 0.12)), "goodput falls") == HOLDS
    assert verdict(runs_table((0.01,) * 3, (0.1,) * 3, (9.5, 9.6, 9.7)), "goodput falls") == FAILS


def test_ranges_apart_by_less_than_the_minimum_effect_are_noise():
    """Two repeats' ranges that miss each other by a hair (goodput bound by the arrivals, every request in
    SLO): not an effect. The same ranges 10% apart are."""
    assert verdict(runs_table((0.01,) * 3, (0.1,) * 3, (6.688, 6.691, 6.694), (6.695,) * 3), "goodput falls") == NOISE
    assert verdict(runs_table((0.01,) * 3, (0.1,) * 3, (6.0, 6.01, 6.02), (6.695,) * 3), "goodput falls") == HOLDS
    split = pd.DataFrame([{"attention": "paged", "passes": 1, "median_ms": 100.0, "min_ms": 99.0, "max_ms": 100.0},
                          {"attention": "paged", "passes": 24, "median_ms": 101.0, "min_ms": 100.5, "max_ms": 101.5}])
    assert split_verdicts(split)["verdict"].item() == NOISE


def test_a_load_with_one_budget_decides_nothing():
    one = runs_table((0.01,) * 3, (0.1,) * 3)
    assert set(budget_verdicts(one[one["budget"] == 64])["verdict"]) == {NA}
    assert decide(pd.Series([], dtype=float), pd.Series([1.0]), "lower") == NA


def test_the_split_claim_per_attention_path():
    split = pd.DataFrame([
        {"attention": "paged", "passes": 1, "median_ms": 97.0, "min_ms": 96.0, "max_ms": 98.0},
        {"attention": "paged", "passes": 24, "median_ms": 110.0, "min_ms": 108.0, "max_ms": 118.0},
        {"attention": "naive", "passes": 1, "median_ms": 1300.0, "min_ms": 1290.0, "max_ms": 1310.0},
        {"attention": "naive", "passes": 24, "median_ms": 380.0, "min_ms": 370.0, "max_ms": 390.0}])
    v = split_verdicts(split).set_index("load")["verdict"]
    assert v["`paged` attention"] == FAILS and v["`naive` attention"] == HOLDS


def test_the_report_prints_the_verdict_the_table_decides(tmp_path):
    """The report's claim section says 'does not hold' for a measured table in which the claim is false."""
    runs = runs_table((0.30, 0.31, 0.32), (0.10, 0.11, 0.12)).drop(columns="load").assign(
        size="large", intensity="8 req/s", seed=3, rate_per_s=8.0)
    split = pd.DataFrame([{"attention": "paged", "passes": p, "median_ms": m, "min_ms": m - 1, "max_ms": m + 1}
                          for p, m in ((1, 97.0), (24, 110.0))])
    text = "\n".join(claim_findings(runs, split, tmp_path))
    [row] = [line for line in text.splitlines() if "the worst stall shrinks" in line]
    assert [cell.strip() for cell in row.split("|")][3] == "does not hold"
    assert "8 req/s (the chapter's rate)" in text


def test_the_report_warns_when_a_simulated_table_predicts_another_machine():
    table = f"### A simulated table\n\nConditions: simulated; profile abc (calibrated on 2x {ZEN5}, torch 2.13.0)\n"
    [line] = other_machine(table, AVX2, simulated=True)
    assert "Simulated for another machine" in line and AVX2 in line
    assert other_machine(table, ZEN5, simulated=True) == []


def test_the_verdicts_are_dvc_metrics(tmp_path):
    runs = runs_table((0.30, 0.31, 0.32), (0.10, 0.11, 0.12)).drop(columns="load").assign(
        size="large", intensity="8 req/s", seed=3, rate_per_s=8.0)
    split = pd.DataFrame([{"attention": "paged", "passes": p, "median_ms": m, "min_ms": m - 1, "max_ms": m + 1}
                          for p, m in ((1, 100.0), (24, 125.0))])
    (tmp_path / "capacity").mkdir()
    (tmp_path / "capacity" / "measured_vs_simulated.csv").write_text("budget,measured_req_per_s\n512,16.0\n")
    metrics = chapter_metrics(runs, split, tmp_path)
    chapter = metrics["chapter"]  # nested: `dvc metrics show` prints chapter.verdict.worst_stall.rate_8
    assert chapter["verdict"]["worst_stall"] == {"rate_8": -1} and chapter["verdict"]["split_faster"] == {"paged": -1}
    assert chapter["prefill_split"]["paged_24x64_over_1x1536"] == 1.25
    assert chapter["capacity"] == {"measured_b512_req_per_s": 16.0, "chapter_rate_share": 0.5}
    assert "production" not in metrics  # no production stage output: none claimed
    (tmp_path / "simulated" / "production").mkdir(parents=True)
    (tmp_path / "simulated" / "production" / "chunking_gain.csv").write_text(
        "model,hardware,workload,load,best_budget,gain_vs_unchunked\n"
        "llama3_8b,h100,azure_conv,0.5,2048,1.2\nllama3_8b,h100,azure_conv,1.0,1024,3.39682\n")
    production = chapter_metrics(runs, split, tmp_path)["production"]
    assert production == {"llama3_8b_h100": {"azure_conv": {"best_budget": 1024, "gain_vs_unchunked": 3.3968}}}


def test_metric_keys_are_short_names_of_the_load():
    assert where_key("load 0.85 of the measured capacity (10.70 req/s)") == "load_0_85"
    assert where_key("8 req/s (the chapter's rate, 0.64 of the measured capacity)") == "rate_8"
    assert where_key("load 1.2") == "load_1_2"


# -- the production section's cost model line (report/production.py)

def test_the_production_section_says_which_presets_borrow_their_fit(tmp_path):
    """Own fit or borrowed is read from outputs/cost_models/presets.csv (the presets' numbers), never written
    by hand: a preset the table calls borrowed is reported borrowed, with its fit's device."""
    import shutil
    from pathlib import Path

    from chunklab.report.production import cost_model_provenance

    committed = Path(__file__).resolve().parents[1] / "outputs" / "cost_models"
    shutil.copytree(committed, tmp_path / "cost_models")
    (line,) = cost_model_provenance(tmp_path)
    assert "Fit on their own device: a100_80g, h100:" in line and "Borrowed: h200 (the h100 fit's)" in line
    assert "a100_80g's operator times priced with the h100 fit +56.9%" in line  # what borrowing cost A100
    presets = pd.read_csv(committed / "presets.csv")
    presets.loc[presets["hardware"] == "a100_80g", "efficiencies_fit_on"] = "h100"
    presets.to_csv(tmp_path / "cost_models" / "presets.csv", index=False)
    (line,) = cost_model_provenance(tmp_path)
    assert "Fit on their own device: h100:" in line and "a100_80g (the h100 fit's), h200 (the h100 fit's)" in line


def test_the_capacity_figure_names_lines_that_hide_each_other():
    from chunklab.stages.sim_figures import coinciding

    rows = [{"workload": "w", "setting": s, "rate_per_s": r, "goodput_req_per_s": g, "slo_attainment": 1.0}
            for s, shift in (("a", 0.0), ("b", 0.0), ("c", 0.5)) for r, g in ((1.0, 1.0 + shift), (2.0, 2.0))]
    assert coinciding(pd.DataFrame(rows)) == "; lines that coincide: w: a = b"
    assert coinciding(pd.DataFrame([r for r in rows if r["setting"] != "b"])) == ""


def test_a_metric_column_reads_as_an_axis_label_with_its_unit():
    from chunklab.report.figures import metric_label

    assert metric_label("ttft_p50_s") == "TTFT p50 (s)"
    assert metric_label("itl_p99_s") == "ITL p99, per gap (s)"
    assert metric_label("goodput_req_per_s") == "goodput (req/s)"
    assert metric_label("slo_attainment") == "slo attainment"


# -- readable tables (report/tables.py)

def test_a_wide_table_is_split_into_parts_of_at_most_8_columns_and_the_csv_keeps_every_column(tmp_path):
    from chunklab.report.tables import MAX_COLUMNS, write

    table = pd.DataFrame({"Configuration": ["Budget 64", "Budget 8192"], "Repeats": [2, 2],
                          **{f"metric {i}": [f"{i}.0", f"{i}.5"] for i in range(9)},
                          "In SLO": ["100%", "100%"], "Slowdown": ["n/a", "n/a"]})
    md = write(table, tmp_path / "tables" / "wide", "A wide table", ["A note."])
    parts = [block for block in md.split("\n\n") if block.startswith("| Configuration")]
    headers = [[c.strip() for c in part.splitlines()[0].strip("|").split("|")] for part in parts]
    assert len(parts) == 2 and all(len(h) <= MAX_COLUMNS and h[:2] == ["Configuration", "Repeats"] for h in headers)
    assert [c for h in headers for c in h[2:]] == [f"metric {i}" for i in range(9)]  # every varying column, once
    assert "The same in every row: In SLO 100%." in md and "n/a in every row): Slowdown." in md
    assert "[tables/wide.csv](tables/wide.csv)" in md and md.index("A note.") < md.index("tables/wide.csv")
    assert list(pd.read_csv(tmp_path / "tables" / "wide.csv").columns) == list(table.columns)


def test_a_narrow_table_stays_one_table_without_a_link(tmp_path):
    from chunklab.report.tables import write

    md = write(pd.DataFrame({"Passes": [1, 24], "Total time (ms)": ["134.1", "172.9"]}), tmp_path / "t", "Narrow", [])
    assert md.count("Passes |") == 1 and "Every column" not in md


def test_the_committed_report_has_one_title_and_no_heading_deeper_than_its_section_allows():
    """REPORT.md's headings in order: one H1, then sections; a stage's table never opens with an H1 or H2
    inside a section, and no heading is empty."""
    import re

    report = (Path(__file__).resolve().parents[1] / "outputs" / "REPORT.md").read_text()
    levels = [(len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#+)(.*)$", report, flags=re.M)]
    assert levels[0][0] == 1 and all(level > 1 for level, _ in levels[1:])
    assert all(text.strip() for _, text in levels)
    assert all(b - a <= 1 for (a, _), (b, _) in zip(levels, levels[1:]))  # never skips a level going down


def test_the_budget_plot_keeps_each_seed_apart_and_takes_the_median_of_its_repeats():
    from chunklab.report.figures import seed_medians

    runs = pd.DataFrame({"size": "large", "seed": [1, 1, 1, 2, 2, 2], "budget": [64, 64, 8192, 64, 8192, 8192],
                         "goodput_req_per_s": [6.0, 7.0, 6.5, 9.0, 9.2, 9.4]})
    m = seed_medians(runs, "size", "budget", ["goodput_req_per_s"])
    assert list(zip(m["seed"], m["budget"], m["goodput_req_per_s"])) == [(1, 64, 6.5), (1, 8192, 6.5), (2, 64, 9.0),
                                                                           (2, 8192, 9.3)]
