"""End to end through run.py: Hydra multirun -> engine -> MLflow, and its errors."""
import os
import subprocess
import sys
import urllib.request
import json
from pathlib import Path

import pandas as pd
import pytest

from helpers import mlflow_server

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["model=micro", "workload.num_requests=10", "workload.rate_per_s=20", "tracking.progress=false",
         "workload.classes=[{label: long, weight: 0.35, min_tokens: 600, max_tokens: 600},"
         "{label: short, weight: 0.65, min_tokens: 16, max_tokens: 32}]",
         "workload.min_output_tokens=8", "workload.max_output_tokens=16"]


def run_cli(tmp_path, *overrides, uri=None):
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri or f"sqlite:///{tmp_path}/mlflow.db")
    args = [sys.executable, "run.py", *SMALL, f"hydra.run.dir={tmp_path}/run",
            f"hydra.sweep.dir={tmp_path}/multirun", *overrides]
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def runs(tmp_path, experiment="chunklab"):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    return mlflow.search_runs(experiment_names=[experiment])


def test_design_multirun_logs_three_finished_named_runs(tmp_path):
    """The README's sweep: three finished runs, named after their budget, each with its metrics,
    artifacts, dataset and system metrics, and no logging noise on stderr. (One sweep checks all
    of it: a second, separate one cost ~40 s of the default suite's 5 minutes on a slow 2-core VM.)"""
    # An interval far longer than the runs: their system metrics come from the sample each run
    # takes as it ends, so this holds on a fast machine and a slow one alike.
    proc = run_cli(tmp_path, "scheduler.budget=64,512,8192", "tracking.system_metrics_interval_s=3600", "-m")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Warning" not in proc.stderr and "INFO" not in proc.stderr, proc.stderr[-2000:]
    df = runs(tmp_path)
    assert sorted(df["params.scheduler.budget"]) == ["512", "64", "8192"]
    assert sorted(df["tags.mlflow.runName"]) == ["budget=512", "budget=64", "budget=8192"]
    assert set(df["status"]) == {"FINISHED"}
    for key in ("ttft_p50_s", "ttft_p99_s", "itl_p99_s", "tpot_p50_s", "goodput_req_per_s", "worst_stall_s",
                "class_long_ttft_p50_s", "step_time_p99_s", "output_tokens_per_s"):
        assert df[f"metrics.{key}"].notna().all(), key
    assert df["tags.multirun"].nunique() == 1
    assert df["tags.conditions.model_params"].nunique() == 1
    assert df["tags.conditions.torch_version"].str.startswith("2.13").all()
    import mlflow

    digests = []
    for run_id in df["run_id"]:
        run = mlflow.get_run(run_id)
        datasets = [d.dataset for d in run.inputs.dataset_inputs]
        assert [d.name for d in datasets] == ["ch10_mixed"] and datasets[0].digest
        assert any(k.startswith("system/cpu_utilization") for k in run.data.metrics)
        names = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id)}
        assert {"summary.json", "requests.csv", "steps.csv", "latency.png"} <= names
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="requests.csv", dst_path=str(tmp_path / run_id))
        digests.append(list(pd.read_csv(path)["output_digest"]))
        steps = mlflow.MlflowClient().get_metric_history(run_id, "step.duration_s")
        assert len(steps) > 10
    assert digests[0] == digests[1] == digests[2]  # chunking never changes the output


@pytest.mark.parametrize("override, message", [
    ("scheduler.budget=0", "scheduler.budget=0"),
    ("workload.rate_per_s=-1", "workload.rate_per_s=-1.0"),
    ("scheduler.ordering=lifo", "scheduler.ordering='lifo'"),
    ("workload=azure_conv", None),  # a missing trace file
])
def test_bad_input_one_line_no_traceback_no_run(tmp_path, override, message):
    extra = ["workload.trace.path=/no/such/trace.csv"] if override == "workload=azure_conv" else []
    proc = run_cli(tmp_path, override, *extra)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("chunklab: error: " + (message or "workload.trace.path='/no/such/trace.csv'"))
    assert not (tmp_path / "mlflow.db").exists() or runs(tmp_path).empty


def test_a_device_that_is_not_here_is_one_line_before_anything_calibrates_or_starts(tmp_path):
    """(A failure after a run started ends it FAILED: tests/test_hardening.py, test_measured_cluster.py.)"""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    proc = run_cli(tmp_path, "engine=cuda")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "chunklab: error: engine.device='cuda': no CUDA device is available here"
    assert "RUNNING" not in set(runs(tmp_path).get("status", []))


def test_a_model_too_big_for_this_machine_gets_one_line_not_an_oom_kill(monkeypatch):
    """Llama-2-7B on this CPU: a line naming the model and both sizes, before any weight is allocated."""
    pytest.importorskip("torch")
    from chunklab.config import ConfigError
    from chunklab.engine.executors import model_runner
    from chunklab.hydra_compose import compose_config

    cfg = compose_config(["model=llama2_7b", "tracking=none"])
    monkeypatch.setattr(model_runner, "available_memory_bytes", lambda: 2**30)
    with pytest.raises(ConfigError, match=r"model=llama2_7b: its weights and KV pool need 3\d\.\d GiB, this machine has 1\.0 GiB"):
        model_runner.check_fits_in_memory(cfg.model, cfg.engine)
    monkeypatch.setattr(model_runner, "available_memory_bytes", lambda: 2**40)
    model_runner.check_fits_in_memory(cfg.model, cfg.engine)


def test_logs_to_a_real_mlflow_server_over_http(tmp_path):
    with mlflow_server(tmp_path) as base:
        proc = run_cli(tmp_path, "tracking.experiment_name=http_check", uri=base)
        assert proc.returncode == 0, proc.stderr[-2000:]
        # Read it back through the REST API the UI uses.
        req = urllib.request.Request(base + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=http_check")
        exp_id = json.load(urllib.request.urlopen(req, timeout=10))["experiment"]["experiment_id"]
        body = json.dumps({"experiment_ids": [exp_id]}).encode()
        req = urllib.request.Request(base + "/api/2.0/mlflow/runs/search", data=body,
                                     headers={"Content-Type": "application/json"})
        found = json.load(urllib.request.urlopen(req, timeout=10))["runs"]
        assert len(found) == 1 and found[0]["info"]["status"] == "FINISHED"
        metrics = {m["key"]: m["value"] for m in found[0]["data"]["metrics"]}
        assert metrics["num_finished"] == 10 and metrics["ttft_p50_s"] > 0


def test_submitit_local_launcher_runs_the_sweep(tmp_path):
    """The cluster path (hydra/launcher=submitit_slurm) differs from this only in where jobs run."""
    proc = run_cli(tmp_path, "hydra/launcher=submitit_local", "tracking=none", "scheduler.budget=64,8192",
                   "allow_parallel_measurements=true", "-m")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summaries = sorted((tmp_path / "multirun").glob("*/summary.json"))
    assert len(summaries) == 2
    digests = [list(pd.read_csv(s.parent / "requests.csv")["output_digest"]) for s in summaries]
    assert digests[0] == digests[1]


def test_optuna_search_writes_and_logs_the_best_trial(tmp_path):
    proc = run_cli(tmp_path, "hparams_search=ch10_goodput", "hydra.sweeper.n_trials=2", "-m")
    assert proc.returncode == 0, proc.stderr[-2000:]
    import yaml

    best = yaml.safe_load((tmp_path / "multirun" / "best_config.yaml").read_text())
    assert set(best["best_params"]) == {"scheduler.budget", "scheduler.budget_policy", "scheduler.max_partial_prefills",
                                        "scheduler.long_prefill_threshold", "scheduler.ordering"}
    df = runs(tmp_path, "tuning")
    assert len(df) == 3 and set(df["status"]) == {"FINISHED"}
    assert df["metrics.best_goodput_req_per_s"].dropna().iloc[0] == best["best_goodput_req_per_s"]
