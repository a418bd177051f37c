"""REPORT.md's writeup: a measured table from another machine never sits silently beside this one's, and
the chapter's claims get the verdict the measured table decides."""
import json
from pathlib import Path

import numpy as np
import pytest
import pandas as pd

from chunklab.config import SloConfig
from chunklab.report.claims import FAILS, HOLDS, NA, NOISE, budget_verdicts, slo_verdicts, split_verdicts, where_key
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


# -- the chapter's claims, decided by the data (report/claims.py, by the paired rule of metrics/paired.py)

def grid(stall_small: float, stall_large: float, itl_small: float = 0.002, itl_large: float = 0.002,
         ttft_small: float = 0.5, ttft_large: float = 0.5, seeds=(3, 4, 5, 6, 7), per_seed: int = 30,
         load: str = "load 0.85 (3.00 req/s)") -> pd.DataFrame:
    """Measured requests of two budgets on the same seeds and request ids, with per-request noise that
    both budgets share (the pairing) and a little of each run's own."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in seeds:
        for rid in range(per_seed):
            shared = rng.lognormal(0, 0.3)
            label = "long" if rid % 3 == 0 else "short"
            for budget, stall, itl, ttft in ((64, stall_small, itl_small, ttft_small),
                                              (8192, stall_large, itl_large, ttft_large)):
                own = rng.lognormal(0, 0.01)
                gaps = [itl * shared * own] * 9 + [stall * shared * own]
                rows.append({"load": load, "budget": budget, "seed": seed, "request_id": rid, "label": label,
                             "status": "finished", "ttft_s": ttft * shared * own, "tpot_s": float(np.mean(gaps)),
                             "itl_p99_s": max(gaps), "max_gap_s": max(gaps),
                             "gaps_s": " ".join(f"{g:.6f}" for g in gaps)})
    return pd.DataFrame(rows)


def verdict(requests: pd.DataFrame, claim_start: str) -> str:
    v = budget_verdicts(requests)
    return v[v["claim"].str.startswith(claim_start)]["verdict"].item()


def test_a_claim_the_data_contradict_is_reported_as_not_holding():
    """The same requests, the smaller budget's stalls made longer: the chapter's claim fails; shorter: it holds."""
    assert verdict(grid(0.30, 0.10), "the worst stall") == FAILS
    assert verdict(grid(0.02, 0.10), "the worst stall") == HOLDS
    assert verdict(grid(0.10, 0.10), "the worst stall") == NOISE
    assert verdict(grid(0.1, 0.1, itl_small=0.003), "typical ITL") == HOLDS
    assert verdict(grid(0.1, 0.1, itl_small=0.001), "typical ITL") == FAILS
    assert verdict(grid(0.1, 0.1, ttft_small=0.8), "the chunked") == HOLDS


def test_a_change_under_the_minimum_effect_is_noise():
    assert verdict(grid(0.1, 0.1, itl_small=0.00201), "typical ITL") == NOISE
    assert verdict(grid(0.1, 0.1, itl_small=0.0021), "typical ITL") == HOLDS


def test_a_load_with_one_budget_decides_nothing():
    one = grid(0.01, 0.1)
    assert set(budget_verdicts(one[one["budget"] == 64])["verdict"]) == {NA}


def test_the_share_within_an_slo_is_decided_per_slo_and_per_multiple():
    """Budget 64's stalls are short, 8192's long: under a stall-aware SLO the small budget keeps more
    requests within it (the goodput claim does not hold); under a TTFT-only SLO nothing differs."""
    requests = grid(0.005, 0.05)
    stall = {"0.5": SloConfig(ttft_s=None, tpot_s=None, itl_p99_s=0.002),
             "1": SloConfig(ttft_s=None, tpot_s=None, itl_p99_s=0.02),
             "2": SloConfig(ttft_s=None, tpot_s=None, itl_p99_s=0.04)}
    v = slo_verdicts(requests, {"stall": stall, "ttft": {"1": SloConfig(ttft_s=10.0, tpot_s=None)}}).set_index("slo")
    assert v.loc["stall", "verdict"] == FAILS and v.loc["ttft", "verdict"] == NOISE
    assert v.loc["stall", "verdict_x0.5"] == NOISE  # halved, no request of either budget meets it
    assert v.loc["stall", "verdict_x2"] == FAILS and v.loc["ttft", "verdict_x2"] == ""


def split(one_ms, many_ms, attention="paged") -> pd.DataFrame:
    return pd.DataFrame([{"attention": attention, "passes": p, "median_ms": float(np.median(t)),
                          "times_ms": " ".join(map(str, t))} for p, t in ((1, one_ms), (24, many_ms))])


def test_the_split_claim_per_attention_path():
    both = pd.concat([split([97, 96, 98, 97, 99], [110, 108, 118, 111, 112]),
                      split([1300, 1290, 1310, 1305, 1295], [380, 370, 390, 385, 375], "naive")])
    v = split_verdicts(both).set_index("load")["verdict"]
    assert v["`paged` attention"] == FAILS and v["`naive` attention"] == HOLDS
    assert split_verdicts(split([100, 99, 100, 101, 100], [101, 100.5, 101.5, 100, 102]))["verdict"].item() == NOISE


def write_grid(outputs: Path, requests: pd.DataFrame, slos: dict | None = None) -> None:
    """The fidelity stage's files the claims section reads, for these requests (repeat 0, one load)."""
    (outputs / "fidelity").mkdir(parents=True, exist_ok=True)
    req = requests.drop(columns="load").assign(point=lambda d: "p" + d["budget"].astype(str) + "s" + d["seed"].astype(str),
                                               repeat=0, rate_per_s=3.0)
    req.to_csv(outputs / "fidelity" / "requests_measured.csv", index=False)
    runs = req.groupby("point", as_index=False).first()[["point", "repeat", "budget", "seed", "rate_per_s"]]
    runs.assign(executor="torch", load=0.85, prefill_step_share=0.5).to_csv(outputs / "fidelity" / "runs.csv", index=False)
    (outputs / "fidelity" / "slos.json").write_text(json.dumps(slos or {}))


def test_the_report_prints_the_verdict_the_data_decide(tmp_path):
    """The report's claim section says 'does not hold' for measured requests in which the claim is false."""
    write_grid(tmp_path, grid(0.30, 0.10))
    text = "\n".join(claim_findings(pd.DataFrame(), split([97, 96, 98], [110, 108, 118]), tmp_path))
    [row] = [line for line in text.splitlines() if "the worst stall" in line]
    assert [cell.strip() for cell in row.split("|")][6] == "does not hold"
    assert "load 0.85 (3.00 req/s)" in text and "seeds 3, 4, 5, 6, 7" in text


def test_the_report_warns_when_a_simulated_table_predicts_another_machine():
    table = f"### A simulated table\n\nConditions: simulated; profile abc (calibrated on 2x {ZEN5}, torch 2.13.0)\n"
    [line] = other_machine(table, AVX2, simulated=True)
    assert "Simulated for another machine" in line and AVX2 in line
    assert other_machine(table, ZEN5, simulated=True) == []


def test_the_verdicts_are_dvc_metrics(tmp_path):
    write_grid(tmp_path, grid(0.30, 0.10), {"ch10": {"1": {"ttft_s": 10.0, "tpot_s": None, "itl_p99_s": None}}})
    (tmp_path / "capacity").mkdir()
    (tmp_path / "capacity" / "measured_vs_simulated.csv").write_text(
        "budget,slo,measured_req_per_s\n512,chapter_scaled,3.5\n64,stall_scaled,5.0\n")
    the_split = split([100, 100, 100], [125, 125, 125])
    metrics = chapter_metrics(pd.DataFrame(), the_split, tmp_path)
    chapter = metrics["chapter"]  # nested: `dvc metrics show` prints chapter.verdict.worst_stall.load_0_85
    assert chapter["verdict"]["worst_stall"] == {"load_0_85": -1} and chapter["verdict"]["split_faster"] == {"paged": -1}
    assert chapter["verdict"]["within_slo"] == {"ch10": {"load_0_85": 0}}
    assert chapter["prefill_split"]["paged_24x64_over_1x1536"] == 1.25
    assert chapter["capacity"]["reference_req_per_s"] == 3.5  # the capacity stage's first row
    assert "production" not in metrics  # no production stage output: none claimed
    (tmp_path / "simulated" / "production").mkdir(parents=True)
    (tmp_path / "simulated" / "production" / "chunking_gain.csv").write_text(
        "model,hardware,workload,load,best_budget,gain_vs_unchunked\n"
        "llama3_8b,h100,azure_conv,0.5,2048,1.2\nllama3_8b,h100,azure_conv,1.0,1024,3.39682\n")
    production = chapter_metrics(pd.DataFrame(), the_split, tmp_path)["production"]
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


def test_a_wide_table_is_split_into_readable_parts_that_repeat_its_keys():
    from chunklab.report.tables import MAX_COLUMNS, narrow_markdown
    header = "| point | budget | " + " | ".join(f"m{i}" for i in range(10)) + " |"
    rule = "|:--|--:|" + "--:|" * 10
    rows = [f"| p{k} | {64 * (k + 1)} | " + " | ".join(str(i + k) for i in range(10)) + " |" for k in range(3)]
    text = "\n".join(["before", header, rule, *rows, "after"])
    out = narrow_markdown(text)
    tables = [line for line in out.splitlines() if line.startswith("|")]
    assert all(line.count("|") - 1 <= MAX_COLUMNS for line in tables)
    assert sum(line.startswith("| point | budget |") for line in tables) == 2  # both parts keep the keys
    assert "| p2 | 192 | 8 | 9 |" in out and out.startswith("before") and out.endswith("after")
    assert narrow_markdown("| a | b |\n|--|--|\n| 1 | 2 |") == "| a | b |\n|--|--|\n| 1 | 2 |"


def test_capacity_on_the_grid_is_where_the_share_within_the_slo_crosses_the_target():
    from chunklab.report.capacity import crossing, text
    estimate, lo, hi = crossing([2.0, 4.0, 8.0], [1.0, 0.95, 0.85])
    assert (lo, hi) == (4.0, 8.0) and 4.0 < estimate < 8.0 and text(estimate, lo, hi) == f"{estimate:.2f}"
    assert estimate == pytest.approx(4.0 * 2 ** 0.5)  # halfway in log-rate: 0.95 -> 0.85 crosses 0.9 midway
    assert text(*crossing([2.0, 4.0], [0.5, 0.2])) == "< 2.00"
    assert text(*crossing([2.0, 4.0], [1.0, 0.95])) == "> 4.00"


def test_the_steady_state_note_says_whether_the_budgets_rank_the_same_at_both_lengths():
    from chunklab.report.capacity import steady_note
    sim = pd.DataFrame({"slo": ["a", "a", "b", "b"], "budget": [64, 512, 64, 512],
                        "simulated_req_per_s": [10.0, 8.0, 4.0, 6.0], "sim_steady_req_per_s": [8.0, 6.0, 3.5, 3.0],
                        "sim_steady_requests": 2000})
    note = steady_note(sim)
    assert "`a` the same" in note and "`b` differently" in note  # b: 512 first at 100 requests, 64 at steady state
    assert "50% to 88%" in note  # 3 / 6 (b, 512) and 3.5 / 4 (b, 64)


def test_the_capacity_note_says_under_which_slo_the_top_load_is_past_capacity():
    from chunklab.report.capacity import past_top_note
    cap = pd.DataFrame({"slo": ["a", "a", "b", "b", "c", "c"], "budget": [64, 512] * 3,
                        "share_at_6": [0.5, 0.8, 0.95, 0.99, 0.85, 0.95]})
    note = past_top_note(cap, 6.0, "load 1.2")
    assert "`a` at every budget" in note and "`b` at no budget" in note and "`c` at budgets 64 only" in note


def test_the_capacity_floor_is_the_reference_cell_measured_twice():
    from chunklab.report.capacity import capacity_floor
    sim = pd.DataFrame({"budget": [512], "slo": ["s"], "measured_req_per_s": [4.0], "simulated_req_per_s": [5.0]})
    cap = pd.DataFrame({"slo": ["s", "s"], "budget": [64, 512], "capacity_req_per_s": [2.0, 3.0]})
    assert capacity_floor(cap, sim) == pytest.approx(0.25)  # |4 - 3| / 4
    assert capacity_floor(cap.assign(capacity_req_per_s=[2.0, float("nan")]), sim) is None  # the grid only bounds it
    assert capacity_floor(cap, sim.drop(columns="measured_req_per_s")) is None
