"""The MLflow UI in a real browser (headless Chromium from Debian's package): a sweep's runs appear
by name, and a run's page shows its TTFT and goodput. Marked slow: it installs Chromium with apt-get
where it is missing (as root) and renders pages with a JavaScript budget of tens of seconds."""
import shutil
import subprocess
import sys

import pytest

from helpers import mlflow_server
from test_cli import ROOT

pytestmark = pytest.mark.slow


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if shutil.which("apt-get") and subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() == "0":
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, timeout=900)
    path = shutil.which("chromium")
    if not path:
        pytest.skip("no Chromium here, and it could not be installed with apt-get")
    return path


def render(browser: str, url: str) -> str:
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=30000",
                           "--window-size=1600,1000", "--dump-dom", url], capture_output=True, text=True, timeout=180)
    return proc.stdout


def test_a_sweep_reads_by_name_in_the_ui(tmp_path):
    browser = chromium()
    with mlflow_server(tmp_path) as url:
        proc = subprocess.run([sys.executable, "run.py", "engine=simulated", "workload.num_requests=100",
                               f"tracking.tracking_uri={url}", "tracking.experiment_name=ui_check",
                               f"hydra.sweep.dir={tmp_path}/sweep", "scheduler.budget=64,8192", "-m"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        import mlflow

        client = mlflow.MlflowClient(tracking_uri=url)
        exp = client.get_experiment_by_name("ui_check")
        runs = client.search_runs([exp.experiment_id])
        page = render(browser, f"{url}/#/experiments/{exp.experiment_id}/runs")  # the "Training runs" list
        assert "budget=64 (simulated)" in page and "budget=8192 (simulated)" in page
        run_page = render(browser, f"{url}/#/experiments/{exp.experiment_id}/runs/{runs[0].info.run_id}")
        assert "ttft_p50_s" in run_page and "goodput_req_per_s" in run_page
