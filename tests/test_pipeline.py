"""Smoke run of the whole DVC pipeline on tiny params in a temporary clone."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MICRO_MIX = ["model=micro", "workload.classes.0.min_tokens=200", "workload.classes.0.max_tokens=200",
             "workload.min_output_tokens=4", "workload.max_output_tokens=8"]
TINY = {
    "calibrate": {"num_random_shapes": 12, "rounds": 1, "burst": 2, "replay_requests": 4, "overrides": ["model=micro"]},
    "fidelity": {"num_requests": 8, "repeats": 2, "seeds": [3, 4], "budgets": [16, 8192], "repeated_budgets": [16], "loads": [0.5, 1.2], "overrides": ["model=micro"],
                 "mix_overrides": MICRO_MIX[1:], "trace": {"rows": 20, "start_offset": 0, "budget": 16},
                 "shares": [[0.1, 16, 0.5]]},
    "prefill_split": {"prompt_tokens": 96, "chunk_tokens": [96, 32], "attention": ["paged", "sdpa", "naive"], "repeats": 1,
                      "overrides": ["model=micro"]},
    "token_budget": {"budgets": [16, 8192], "seeds": [3, 4], "small_requests": 6, "large_requests": 8, "repeats": 2,
                     "extra_seeds": [4], "rate_per_s": 20.0, "overrides": MICRO_MIX},
    "perf": {"repeats": 1, "prefill_samples": 2, "prompt_tokens": 96, "chunk_tokens": 32, "decode_context": 64, "overhead_requests": 20,
             "hf_prompt_tokens": 16, "hf_new_tokens": 4, "rss_requests": [3, 6], "budgets": [16, 8192],
             "sim_requests": 6, "sim_trace_rows": 30, "time_build": False, "overrides": MICRO_MIX,
             "peer": {"repeats": 1, "prompt_tokens": 96, "prefill_chunks": [96, 32], "static_batch": 2,
                      "static_prompt_tokens": 16, "static_new_tokens": 4, "static_budget": 8192, "serve_requests": 4, "serve_repeats": 2,
                      "rate_per_s": 8.0, "seed": 3, "budgets": [16, 8192]}},
    "capacity": {"num_requests": 6, "overrides": MICRO_MIX, "rel_tol": 0.5, "sim_rel_tol": 0.1, "widen": 4.0,
                 "budgets": [16, 8192], "reference_budget": 16, "seeds": [3],
                 "slos": ["ch10"], "reference_slo": "ch10", "extra_cells": [[8192, "stall_scaled"]], "sim_seeds": [3, 4], "steady_requests": 20},
    "sim": {"seeds": [1, 2], "num_requests": 30, "overrides": MICRO_MIX},
    "sim_tuning": {"workloads": ["ch10_mixed"], "n_trials": 2},
    "sim_capacity": {"workloads": ["ch10_mixed"], "budgets": [16, 8192], "rel_tol": 0.5},
    "sim_maps": {"workloads": ["ch10_mixed"], "budgets": [16, 8192], "loads": [0.5, 1.0]},
    "sim_traces": {"budgets": [16], "compressed_budget": 16, "num_requests": 40, "overrides": ["model=micro"]},
    "cost_models": {"cpu_overrides": ["model=micro"]},
    "sim_production": {"pairs": [["llama3_8b", "h100"]], "workloads": ["ch10_production", "azure_conv"],
                       "trace_rows": 40, "num_requests": 40, "seeds": [1], "budgets": [512, 16384], "loads": [0.5, 1.0],
                       "capacity_rel_tol": 0.2},
    "clocks": {"num_requests": 6, "repeats": 2, "loads": [0.5], "overrides": MICRO_MIX},
    "sim_share": {"shares": [0.1, 0.5], "budgets": [16, 8192], "num_requests": 20, "seeds": [3, 4], "rel_tol": 0.2,
                  "overrides": MICRO_MIX},
    "budget_policy": {"num_requests": 8, "seeds": [3, 4], "loads": [0.5, 1.2], "slos": ["stall_scaled"],
                      "overrides": MICRO_MIX},  # the fidelity grid's requests (its overrides and mix_overrides)
    "sim_budget_policy": {"workloads": ["ch10_mixed"], "budgets": [16, 8192], "slos": ["stall_scaled"], "num_requests": 20,
                          "seeds": [3, 4], "rel_tol": 0.2, "overrides": MICRO_MIX},
    "sim_policy_production": {"pairs": [["llama3_8b", "h100"]], "workloads": ["ch10_production", "azure_conv"],
                              "trace_rows": 40, "num_requests": 40, "budgets": [512, 16384], "rel_tol": 0.2},
    "topologies": {"num_requests": 8, "repeats": 2, "loads": [0.5], "link_repeats": 2, "overrides": MICRO_MIX,
                "capacity_cell": [16, "ch10"]},
    "sim_disagg": {"pairs": [["llama3_8b", "h100", 1.0]], "gpus": [2], "workloads": ["ch10_production", "azure_conv"],
                   "num_requests": 40, "loads": [1.0, 2.0], "verdict_loads": [1.0], "throughput_load": 2.0,
                   "budgets": [512], "links": ["nvlink4"], "capacity_rel_tol": 0.2},
}
TRACE_ROWS = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
    f"2023-11-16 18:15:{10 + i // 4:02d}.{(i % 4) * 25:02d}00000,{(37 * i) % 900 + 20},{(11 * i) % 12 + 2}" for i in range(60)]
EXPECTED = [
    "outputs/machine.json",
    *[f"outputs/profiles/{f}" for f in ("machine.json", "machine_probe_only.json", "machine_shapes.csv",
                                        "machine_serving_steps.csv")],
    *[f"outputs/fidelity/{f}" for f in ("fidelity.csv", "paired.csv", "paired_before_after.csv",
                                        "requests_measured.csv", "step_error.csv", "drift.csv",
                                        "fidelity_sentinel_scaled.csv")], "outputs/tables/fidelity.md",
    "outputs/prefill_split.csv", "outputs/prefill_split_conditions.json",
    "outputs/token_budget/runs.csv", "outputs/token_budget/requests.csv", "outputs/token_budget/tokens.csv",
    *[f"outputs/tables/{t}.{ext}" for t in ("prefill_split", "token_budget_small", "token_budget_large",
                                            "token_budget_chapter", "token_budget_loads") for ext in ("md", "csv")],
    *[f"outputs/plots/{p}.png" for p in ("ttft_ecdf", "itl_distribution", "timeline", "prefill_split",
                                         "metrics_vs_budget", "ttft_by_class", "fidelity", "budget_by_load")],
    "outputs/REPORT.md", "outputs/perf.csv", "outputs/perf_end_to_end.csv", "outputs/tables/perf.md",
    "outputs/capacity/measured_vs_simulated.csv", "outputs/capacity/probes.csv", "outputs/capacity/sentinel_scaled.csv",
    "outputs/tables/capacity.md", 
    "outputs/simulated/tuning/best_ch10_mixed.yaml", "outputs/simulated/tuning/trials.csv",
    "outputs/simulated/capacity/capacity.csv", "outputs/simulated/capacity/probes.csv",
    "outputs/simulated/maps/cells.csv", "outputs/plots/simulated/best_budget.png",
    "outputs/plots/simulated/ch10_mixed_heatmaps.png", "outputs/simulated/traces/classes.csv",
    "outputs/plots/simulated/queue.png", "outputs/plots/simulated/goodput_vs_rate.png",
    "outputs/plots/cost_models/h100_fit.png", "outputs/plots/cost_models/a100_fit.png",
    *[f"outputs/simulated/tables/{t}.md" for t in ("tuning", "capacity", "maps", "traces", "production", "share")],
    "outputs/simulated/share/capacity.csv", "outputs/simulated/share/verdicts.csv", "outputs/fidelity/slos.json",
    "outputs/clocks/runs.csv", "outputs/clocks/paired.csv", "outputs/tables/clocks.md",
    *[f"outputs/cost_models/{f}" for f in ("h100_fit.json", "a100_fit.json",
                                           "decode_steps.csv", "presets.csv", "cpu_fit.json", "cost_models.md")],
    *[f"outputs/simulated/production/{f}" for f in ("cells.csv", "capacity.csv", "chunking_gain.csv", "published.csv")],
    "outputs/plots/simulated/production_llama3_8b_h100_azure_conv_heatmaps.png",
    *[f"outputs/simulated/disagg/{f}" for f in ("capacity.csv", "cells.csv", "winners.csv", "metrics.json",
                                                                "conditions.json")],
    "outputs/plots/simulated/disagg_llama3_8b_h100_nvlink4.png",
    *[f"outputs/topologies/{f}" for f in ("shm_link.csv", "shm.yaml", "runs.csv", "paired.csv", "metrics.json")],
    "outputs/tables/topologies.md",
    "outputs/budget_policy/requests.csv", "outputs/simulated/budget_policy/standing.csv",
    "outputs/simulated/budget_policy/costs.csv", "outputs/simulated/tables/budget_policy.md",
    "outputs/simulated/policy_production/capacity.csv", "outputs/simulated/tables/policy_production.md",
    "outputs/simulated/sensitivity/settings.json", "outputs/simulated/sensitivity/step_overhead_x2/winners.csv",
]
SIM_OUTPUTS = "outputs/simulated"


def clone_working_tree(dst: Path) -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file() and not name.startswith("outputs/"):
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)
    (dst / ".venv").symlink_to(Path(sys.executable).parents[1])


@pytest.mark.pipeline  # ~3 min of its own: `make test-pipeline` (CI runs it after `make test`)
def test_dvc_repro_smoke(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    clone_working_tree(repo)
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(TRACE_ROWS) + "\n")
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for stage, values in TINY.items():
        params[stage].update(values)
    params["sim_traces"]["overrides"].append(f"workload.trace.path={trace}")
    params["fidelity"]["trace"]["overrides"] = [f"workload.trace.path={trace}"]
    params["perf"]["trace_overrides"] = ["model=micro", f"workload.trace.path={trace}"]
    params["sim_production"]["overrides"] = [f"workload.trace.path={trace}"]
    params["sim_disagg"]["overrides"] = [f"workload.trace.path={trace}"]
    params["sim_policy_production"]["overrides"] = [f"workload.trace.path={trace}"]
    (repo / "params.yaml").write_text(yaml.safe_dump(params))
    env = dict(os.environ, PYTHONPATH=str(repo / "src"), CHUNKLAB_PROJECT_DIR=str(repo),  # the clone, not this checkout
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db",
               CHUNKLAB_CAPACITY_REQUESTS="100",  # the fused forward as built for this checkout (same sources)
               CHUNKLAB_EXTENSIONS_DIR=os.environ.get("CHUNKLAB_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions")),
               # and the compiled core of these sources, where `make core` built it (a build of others is never loaded)
               CHUNKLAB_COMPILED_DIR=os.environ.get("CHUNKLAB_COMPILED_DIR", str(ROOT / ".cache" / "compiled_core")))
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "smoke")
    dvc = str(repo / ".venv" / "bin" / "dvc")
    first = subprocess.run([dvc, "repro"], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    paired = (repo / "outputs/fidelity/paired.csv").read_text().splitlines()
    assert paired[0] == "point,metric,median_rel_error,p90_rel_error,n" and len(paired) == 1 + 3 * 4  # 4 repeated points x 3 metrics
    assert not [line for line in paired if " b8192 " in line]  # budget 8192 is not in repeated_budgets: run once
    measured = (repo / "outputs/fidelity/requests_measured.csv").read_text()
    assert "\nch10_mixed b8192 load 0.5,0," in measured and "\nch10_mixed b8192 load 0.5,1," not in measured
    cap = (repo / "outputs/capacity/measured_vs_simulated.csv").read_text().splitlines()
    assert cap[0].startswith("budget,slo,measured_req_per_s,") and len(cap) == 1 + 2 + 1  # budgets x SLOs + the extra cell
    assert cap[1].startswith("16,ch10,")  # the reference cell first: every load is a fraction of it
    drift = (repo / "outputs/fidelity/drift.csv").read_text().splitlines()
    assert drift[0].startswith("point,repeat,sentinel_ratio,step_time_vs_predicted_p50,") and len(drift) == 1 + 4 * 2  # (budget 16 x 2 loads + a share cell + the trace) x 2 repeats
    assert "median_signed_error_ttft (sentinel-scaled)" in drift[0]
    missing = [p for p in EXPECTED if not (repo / p).is_file()]
    assert not missing
    assert "| Budget 16 tokens/step" in (repo / "outputs/tables/token_budget_large.md").read_text()
    # DVC's own views work: metrics (show, and diff against the committed state) and plots.
    shown = subprocess.run([dvc, "metrics", "show", "--json"], cwd=repo, env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    def keys(tree: dict, prefix: str = "") -> set[str]:  # dotted, as `dvc metrics show` prints them
        return set().union(*[keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}"}
                             for k, v in tree.items()]) if tree else set()
    metrics = {k for doc in json.loads(shown.stdout).values() for f in doc["data"].values()
               for k in keys(f.get("data", {}))}
    assert {"held_out_serving_median_rel_error", "fidelity.as_run.percentile_rows_meeting_goal",
            "simulated_speedup", "sim_share.best_budget.stall_scaled.share_10"} <= metrics
    assert all(" " not in k for k in metrics), [k for k in metrics if " " in k]  # short keys, no sentences
    unreadable = [p for doc in json.loads(shown.stdout).values() for p, f in doc["data"].items() if "error" in f]
    assert unreadable == []  # every declared metrics file parses (a markdown table does not)
    assert subprocess.run([dvc, "metrics", "diff"], cwd=repo, env=env, capture_output=True).returncode == 0
    plots = subprocess.run([dvc, "plots", "show", "-o", str(tmp_path / "plots")], cwd=repo, env=env,
                           capture_output=True, text=True)
    assert plots.returncode == 0, plots.stderr
    html = (tmp_path / "plots" / "index.html").read_text()
    assert "fidelity.png" in html and "best_budget.png" in html
    second = subprocess.run([dvc, "repro"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0
    # Only the machine stage runs (always_changed); its output is unchanged, so nothing downstream does.
    assert re.findall(r"Running stage '(\w+)'", second.stdout) == ["machine"], second.stdout[-3000:]
    # Simulated outputs reproduce byte for byte, from a cold capacity cache too.
    before = {p: p.read_bytes() for p in (repo / SIM_OUTPUTS).rglob("*") if p.is_file()}
    shutil.rmtree(repo / ".cache", ignore_errors=True)
    sims = ["sim_tuning", "sim_capacity", "sim_maps", "sim_traces"]
    again = subprocess.run([dvc, "repro", "-f", "-s", *sims], cwd=repo, env=env, capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    after = {p: p.read_bytes() for p in (repo / SIM_OUTPUTS).rglob("*") if p.is_file()}
    assert after.keys() == before.keys() and [p for p in after if after[p] != before[p]] == []
