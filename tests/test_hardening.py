"""Faults and bad input through run.py, as a user meets them: signals, empty results, bad
traces, MLflow's view of a sweep, and launchers that would corrupt measurements."""
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from chunklab.interrupts import Interrupts
from chunklab.tracking.orphans import process_tags
from test_cli import ROOT, SMALL, run_cli, runs

LONG_RUN = [*SMALL, "workload.num_requests=3000", "workload.rate_per_s=2000"]


def start_cli(tmp_path, *overrides):
    """run.py in the background, returned once its MLflow run is RUNNING: its signal handlers are
    in place and it has thousands of requests ahead of it, on a fast machine or a slow one."""
    env = dict(os.environ, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/mlflow.db")
    proc = subprocess.Popen([sys.executable, "run.py", *LONG_RUN, f"hydra.run.dir={tmp_path}/run", *overrides],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300  # a bound on a broken run, not a timing the test depends on
    while run_statuses(tmp_path / "mlflow.db") != ["RUNNING"]:
        assert proc.poll() is None and time.time() < deadline, "the run never started"
        time.sleep(0.2)
    return proc


def run_statuses(store: Path) -> list[str]:
    """Statuses of the runs in a sqlite MLflow store, read without MLflow (it may still be creating it)."""
    if not store.is_file():
        return []
    try:
        with contextlib.closing(sqlite3.connect(store, timeout=5)) as db:
            return [status for (status,) in db.execute("SELECT status FROM runs")]
    except sqlite3.OperationalError:  # tables not created yet, or locked for a moment
        return []


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_the_run_killed_with_its_partial_results(tmp_path, sig, code):
    proc = start_cli(tmp_path)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr[-2000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"chunklab: interrupted by {sig.name}: ") and "partial results in" in last
    assert "marked KILLED" in last
    df = runs(tmp_path)
    assert list(df["status"]) == ["KILLED"]
    assert df["metrics.num_unfinished"].iloc[0] > 0
    requests = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert len(requests) == 3000  # none lost: finished, or unfinished with where the stop found it
    assert set(requests["status"]) <= {"finished", "unfinished"} and (requests["status"] == "unfinished").any()
    assert requests.loc[requests["status"] == "unfinished", "reason"].str.startswith("run stopped while").all()
    import mlflow

    names = {a.path for a in mlflow.MlflowClient().list_artifacts(df["run_id"].iloc[0])}
    assert {"summary.json", "requests.csv", "steps.csv"} <= names


def test_a_second_signal_exits_at_once(monkeypatch):
    exits = []
    monkeypatch.setattr(os, "_exit", exits.append)
    interrupts = Interrupts()
    interrupts.handle(signal.SIGTERM)
    assert interrupts.requested and not exits
    interrupts.handle(signal.SIGTERM)
    assert exits == [143]


def test_every_request_rejected_is_still_a_result(tmp_path):
    proc = run_cli(tmp_path, "engine.num_blocks=1", "tracking=none")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "10 rejected" in proc.stdout
    requests = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert set(requests["status"]) == {"rejected"} and requests["reason"].str.contains("KV blocks").all()
    assert (tmp_path / "run" / "latency.png").stat().st_size > 0


def test_a_binary_trace_is_one_line_naming_the_file(tmp_path):
    trace = tmp_path / "noise.csv"
    trace.write_bytes(os.urandom(4096))
    proc = run_cli(tmp_path, "workload=azure_conv", f"workload.trace.path={trace}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"chunklab: error: {trace}")


def test_a_run_killed_with_sigkill_is_ended_killed_by_the_next_run(tmp_path):
    import mlflow

    proc = start_cli(tmp_path)
    proc.kill()  # SIGKILL: the run cannot mark itself
    proc.communicate(timeout=60)
    assert run_statuses(tmp_path / "mlflow.db") == ["RUNNING"]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    alive = client.create_run(client.get_experiment_by_name("chunklab").experiment_id,
                              tags=process_tags())  # RUNNING, owned by this live process: left alone
    nxt = run_cli(tmp_path, "workload.num_requests=2")
    assert nxt.returncode == 0, nxt.stderr[-2000:]
    notices = [line for line in nxt.stderr.splitlines() if "was left RUNNING by process" in line]
    assert len(notices) == 1 and notices[0].endswith("marked KILLED") and f"process {proc.pid}," in notices[0]
    df = runs(tmp_path).set_index("run_id")
    assert df.loc[alive.info.run_id, "status"] == "RUNNING"
    assert sorted(df.drop(alive.info.run_id)["status"]) == ["FINISHED", "KILLED"]
    assert "Traceback" not in nxt.stderr


def test_a_single_run_is_named_after_its_experiment_in_a_store_where_the_command_runs(tmp_path):
    """No MLFLOW_TRACKING_URI: mlflow.db in the current directory (not the project's), and the run
    prints its result line and nothing else."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run([sys.executable, str(ROOT / "run.py"), *SMALL, "experiment=ch10", "workload.num_requests=4",
                           "slowdown=false", f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "mlflow.db").is_file()
    assert list(runs(tmp_path, "ch10")["tags.mlflow.runName"]) == ["ch10"]
    assert proc.stderr == "" and len(proc.stdout.splitlines()) == 1 and proc.stdout.startswith("budget")


def test_parallel_real_measurements_are_refused_in_one_line(tmp_path):
    proc = run_cli(tmp_path, "hydra/launcher=joblib", "scheduler.budget=64,8192", "-m")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("chunklab: error: hydra/launcher=JoblibLauncher")
    assert not (tmp_path / "multirun").exists() or not list((tmp_path / "multirun").glob("*/summary.json"))


def test_parallel_simulated_sweep_into_a_fresh_store(tmp_path):
    """Jobs start together into an mlflow.db that does not exist yet: none may be lost."""
    proc = run_cli(tmp_path, "model=tiny_gpt", "engine=simulated", "hydra/launcher=joblib",
                   "hydra.launcher.n_jobs=2", "scheduler.budget=64,512,2048,8192", "-m")
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = runs(tmp_path)
    assert len(df) == 4 and set(df["status"]) == {"FINISHED"}
    assert set(df["tags.executor"]) == {"simulated"}
    assert sorted(df["tags.mlflow.runName"]) == sorted(f"budget={b} (simulated)" for b in (64, 512, 2048, 8192))


def test_a_failing_step_ends_failed_and_keeps_what_was_measured(tmp_path, monkeypatch):
    """A step that raises (say, out of memory at step 40): the run is FAILED, its 39 steps and the
    requests finished before are in the run folder and in MLflow."""
    import mlflow

    from chunklab.app import run_tracked
    from chunklab.engine.engine import LLMEngine
    from chunklab.experiments.compose import compose_run_config

    real_step, calls = LLMEngine.try_step_values, []  # every loop's step: step_values wraps it, the simulator calls it

    def failing_step(self):
        calls.append(1)
        if len(calls) == 40 + 2:  # after the warm-up's steps
            raise MemoryError("simulated out of memory")
        return real_step(self)

    # composed first: a machine with no profile yet calibrates here, through the real step
    cfg = compose_run_config(["engine=simulated", "workload.num_requests=50", "tracking.progress=false",
                              f"tracking.tracking_uri=sqlite:///{tmp_path}/mlflow.db"])
    monkeypatch.setattr(LLMEngine, "try_step_values", failing_step)
    with pytest.raises(MemoryError):
        run_tracked(cfg, tmp_path / "run", {})
    steps = pd.read_csv(tmp_path / "run" / "steps.csv")
    requests = pd.read_csv(tmp_path / "run" / "requests.csv")
    assert len(steps) > 0 and len(requests) == 50 and (requests["status"] == "unfinished").any()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    df = mlflow.search_runs(experiment_names=["chunklab"])
    assert list(df["status"]) == ["FAILED"] and df["metrics.num_unfinished"].iloc[0] > 0
