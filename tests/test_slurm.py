"""The cluster path, live: a single-node SLURM and an MLflow server on 127.0.0.1 (scripts/slurm_local.sh),
a real-engine sweep through hydra/launcher=slurm, a simulated one through slurm_sim, and scancel.

Marked `slurm` (`make test-slurm`; .ci/run runs it): it installs slurm-wlm with apt-get where it is
missing and the user is root, and skips with a one-line reason where it cannot run."""
import json
import os
import subprocess
import sys
import time

import pytest

from helpers import mlflow_server
from test_cli import ROOT

pytestmark = pytest.mark.slurm
MICRO = ["model=micro", "workload.classes.0.min_tokens=300", "workload.classes.0.max_tokens=300",
         "workload.min_output_tokens=8", "workload.max_output_tokens=16", "tracking.progress=false"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    home = tmp_path_factory.mktemp("cluster")
    script = ROOT / "scripts" / "slurm_local.sh"
    up = subprocess.run([str(script), "up", str(home / "slurm")], capture_output=True, text=True, timeout=600)
    try:
        if up.returncode != 0:
            pytest.skip(f"no single-node SLURM here: {(up.stderr.strip().splitlines() or ['?'])[-1]}")
        with mlflow_server(home) as url:
            env = dict(os.environ, SLURM_CONF=str(home / "slurm" / "slurm.conf"), MLFLOW_TRACKING_URI=url)
            yield {"env": env, "url": url, "home": home}
    finally:
        subprocess.run([str(script), "down", str(home / "slurm")], timeout=120)


def sweep(cluster, name, *overrides, wait=True):
    args = [sys.executable, "run.py", f"tracking.tracking_uri={cluster['url']}", f"tracking.experiment_name={name}",
            f"hydra.sweep.dir={cluster['home']}/{name}", *overrides, "-m"]
    if not wait:
        return subprocess.Popen(args, cwd=ROOT, env=cluster["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    return subprocess.run(args, cwd=ROOT, env=cluster["env"], capture_output=True, text=True, timeout=900)


def server_runs(cluster, experiment):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=cluster["url"])
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id])


def test_real_sweep_takes_whole_nodes_and_logs_to_the_server(cluster):
    t0 = time.time()
    proc = sweep(cluster, "cluster_real", "hydra/launcher=slurm", *MICRO, "workload.num_requests=40",
                 "scheduler.budget=64,8192")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(server_runs(cluster, "cluster_real"), key=lambda r: r.info.start_time)
    assert [r.info.status for r in runs] == ["FINISHED", "FINISHED"]
    assert sorted(r.data.tags["mlflow.runName"] for r in runs) == ["budget=64", "budget=8192"]
    assert all(r.data.metrics["num_finished"] == 40 and r.data.metrics["ttft_p50_s"] > 0 for r in runs)
    # --exclusive on a one-node cluster: the second measurement starts after the first ended.
    assert runs[1].info.start_time >= runs[0].info.end_time
    timings = {"queue_wait_s": runs[0].info.start_time / 1e3 - t0,
               "gap_between_jobs_s": (runs[1].info.start_time - runs[0].info.end_time) / 1e3,
               "sweep_wall_s": time.time() - t0}
    print("cluster timings:", json.dumps(timings))


def test_simulated_sweep_packs_jobs(cluster):
    proc = sweep(cluster, "cluster_sim", "hydra/launcher=slurm_sim", "engine=simulated", "workload.num_requests=200",
                 "scheduler.budget=64,512,8192")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = server_runs(cluster, "cluster_sim")
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3
    assert {r.data.tags["executor"] for r in runs} == {"simulated"}


def test_a_file_store_is_refused_for_cluster_sweeps(cluster):
    env = dict(cluster["env"])
    env.pop("MLFLOW_TRACKING_URI")
    proc = subprocess.run([sys.executable, "run.py", "hydra/launcher=slurm", *MICRO, "scheduler.budget=64,512",
                           f"hydra.sweep.dir={cluster['home']}/refused", "-m"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cluster jobs need an MLflow server" in proc.stderr.strip().splitlines()[-1]


def test_scancel_ends_the_run_killed_with_partial_results(cluster):
    proc = sweep(cluster, "cluster_cancel", "hydra/launcher=slurm", *MICRO, "workload.num_requests=20000",
                 "workload.rate_per_s=500", "scheduler.budget=64", wait=False)
    try:
        deadline = time.time() + 300
        while not any(r.info.status == "RUNNING" for r in server_runs(cluster, "cluster_cancel")):
            assert proc.poll() is None and time.time() < deadline, "the job never started a run"
            time.sleep(1)
        # RUNNING: its signal handlers are in place (no sleep: how far it got depends on the machine)
        jobs = subprocess.run(["squeue", "-h", "-o", "%i"], env=cluster["env"], capture_output=True, text=True)
        assert jobs.stdout.split(), "no job in the queue"
        subprocess.run(["scancel", *jobs.stdout.split()], env=cluster["env"], check=True)
        deadline = time.time() + 120
        while True:
            [run] = server_runs(cluster, "cluster_cancel")
            if run.info.status != "RUNNING" or time.time() > deadline:
                break
            time.sleep(1)
        assert run.info.status == "KILLED"
        assert 0 < run.data.metrics["num_unfinished"] <= 20000  # every request kept, finished or not
        assert run.data.metrics["num_finished"] + run.data.metrics["num_unfinished"] == 20000
        import mlflow

        names = {a.path for a in mlflow.MlflowClient(tracking_uri=cluster["url"]).list_artifacts(run.info.run_id)}
        assert {"summary.json", "requests.csv", "steps.csv"} <= names
    finally:
        proc.kill()
        proc.communicate(timeout=60)
