"""The project travels as a checkout: its data inside it, its relative paths its own.

A user's clone has nothing beside it, and two copies of the project may share one
environment (the chunklab package installed from one of them)."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chunklab.config import MAX_REQUESTS, ConfigError, validate
from chunklab.experiments.compose import compose_run_config
from test_cli import run_cli, runs

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
PROFILE = "outputs/profiles/machine.json"
SHORT = ["workload.num_requests=3", "workload.classes=[{label: short, weight: 1, min_tokens: 16, max_tokens: 32}]",
         "workload.min_output_tokens=4", "workload.max_output_tokens=6", "tracking.progress=false"]


def test_nothing_reads_the_shared_folder_beside_the_checkout():
    offenders = []
    for top in ("conf", "src", "tests", "dvc.yaml", "params.yaml", "Makefile", "run.py"):
        paths = [ROOT / top] if (ROOT / top).is_file() else sorted((ROOT / top).rglob("*"))
        for path in paths:
            if path.is_file() and path.suffix not in (".pyc", ".so", ".o") and path != Path(__file__):
                if re.search(r"\.\./shared|parents\[2\] / \"shared\"|\"shared\" / \"traces\"", path.read_text(errors="replace")):
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_vendored_trace_is_the_published_file_with_its_attribution():
    expected = (TRACE.parent / "SHA256SUMS").read_text().split()[0]
    assert hashlib.sha256(TRACE.read_bytes()).hexdigest() == expected
    assert len(TRACE.read_text().splitlines()) == 1 + 19_366  # the header and every request
    notes = (TRACE.parent / "README.md").read_text() + (TRACE.parent / "LICENSE").read_text()
    assert "CC BY 4.0" in notes and "Splitwise" in notes
    cfg = compose_run_config(["workload=azure_conv"])  # the default config reads it from the checkout
    assert Path(cfg.workload.trace.path) == TRACE


def test_a_relative_trace_path_is_taken_from_the_project_not_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKLAB_PROJECT_DIR", str(ROOT))
    monkeypatch.chdir(tmp_path)
    cfg = compose_run_config(["workload=azure_conv"])
    assert Path(cfg.workload.trace.path) == TRACE


def test_a_huge_workload_is_refused_in_one_line_at_once(tmp_path):
    proc = run_cli(tmp_path, "workload.num_requests=100000000")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"chunklab: error: workload.num_requests=100000000: at most {MAX_REQUESTS:,} a run: every request's record "
        "and token times stay in memory until the run writes its tables (~6.4 KB each, ~6.5 GB at the limit); "
        "split the work over seeds or runs"]
    validate(compose_run_config([f"workload.num_requests={MAX_REQUESTS}"]))  # the limit itself is allowed


def second_copy(dst: Path) -> str:
    """The checkout's tracked files (and its profile, changed so that its digest differs); returns that digest."""
    files = subprocess.run(["git", "ls-files", "-z", "conf", "run.py", PROFILE], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dst / name)
    doc = json.loads((dst / PROFILE).read_text())
    doc["conditions"]["measured_at"] = "copy"  # same predictions, another file
    (dst / PROFILE).write_text(json.dumps(doc, indent=1))
    return hashlib.sha256((dst / PROFILE).read_bytes()).hexdigest()[:12]


def test_a_second_copy_sharing_the_environment_reads_its_own_files(tmp_path):
    copy = tmp_path / "copy"
    copy_digest = second_copy(copy)
    main_digest = hashlib.sha256((ROOT / PROFILE).read_bytes()).hexdigest()[:12]
    assert copy_digest != main_digest
    env = {k: v for k, v in os.environ.items() if k != "CHUNKLAB_PROJECT_DIR"} | {
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db", "CHUNKLAB_CAPACITY_REQUESTS": "100",
        # the fused forward as built for the main checkout (same sources): no second 30 s build
        "CHUNKLAB_EXTENSIONS_DIR": os.environ.get("CHUNKLAB_EXTENSIONS_DIR", str(ROOT / ".cache" / "torch_extensions"))}
    for args in (["engine=simulated", f"engine.profile={PROFILE}", "workload.load=0.5"],
                 ["tracking.run_name=measured", f"engine.profile={PROFILE}"]):
        proc = subprocess.run([sys.executable, "run.py", *SHORT, *args, f"hydra.run.dir={tmp_path}/run"], cwd=copy,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    df = runs(tmp_path)
    assert set(df["tags.profile.digest"]) == {copy_digest}  # the simulated run and the measured run's noise guard
    assert len(list((copy / ".cache" / "capacity").glob("*.json"))) == 1  # workload.load cached in the copy
    assert (copy / "mlflow.db").exists() is False  # the store named by MLFLOW_TRACKING_URI, nothing else


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_compose_finds_the_project_from_the_current_folder(tmp_path, monkeypatch, where):
    monkeypatch.delenv("CHUNKLAB_PROJECT_DIR", raising=False)
    monkeypatch.chdir(ROOT / "src" if where == "inside" else tmp_path)
    if where == "inside":
        assert compose_run_config(["engine=simulated", f"engine.profile={PROFILE}"]).engine.profile == PROFILE
    else:
        with pytest.raises(ConfigError, match="no conf/config.yaml in .* or above"):
            compose_run_config([])


def test_a_trace_run_prints_its_result_line_and_nothing_else(tmp_path):
    """MLflow's store and experiment creation, the dataset's schema and its file source stay quiet
    (a synthetic run: test_hardening's single-run test)."""
    proc = run_cli(tmp_path, "workload=azure_conv", "workload.num_requests=4")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""
    assert len(proc.stdout.splitlines()) == 1 and proc.stdout.startswith("budget")
    assert list(runs(tmp_path)["status"]) == ["FINISHED"]
