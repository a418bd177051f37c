"""Every `python run.py ...` line of README's "Main commands" runs as written, with a small
workload.num_requests added. The commands are read from README.md, so a command added there is
tested here without an edit.

- slow: all of them in README order on a machine with no profile yet: the first command that needs
  one calibrates it (smoke-sized), once, and the rest reuse it;
- default suite: the simulated ones (and --help) against the suite's shared smoke profile, and
  workload.load on a measured config with no profile, which prepare must resolve before the load."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from chunklab.experiments import load
from chunklab.experiments.compose import compose_run_config

ROOT = Path(__file__).resolve().parents[1]
NUM_REQUESTS = 6


def readme_commands() -> list[str]:
    """The `python run.py` lines of the README section "Main commands", comments dropped."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Main commands", 1)[1].split("\n## ", 1)[0]
    lines = [line.split("#", 1)[0].strip() for line in section.splitlines()]
    return [line for line in lines if line.startswith("python run.py")]


def measured(command: str) -> bool:
    return "engine=simulated" not in command and "--help" not in command


def small(command: str) -> list[str]:
    """The command's arguments with workload.num_requests set small (a trace's `null`, every row, too)."""
    args = [a for a in shlex.split(command)[2:] if not a.startswith("workload.num_requests=")]
    if "--help" in args:
        return args
    flags = [a for a in args if a.startswith("-")]  # after the overrides, as argparse wants them
    return [*(a for a in args if not a.startswith("-")), f"workload.num_requests={NUM_REQUESTS}", *flags]


def run_as_written(command: str, tmp: Path, env: dict) -> subprocess.CompletedProcess:
    """Runs it and checks its output: exit 0, no error, one result line per run, requests finished."""
    args = small(command)
    where = [f"hydra.sweep.dir={tmp / 'sweep'}"] if "-m" in args else [f"hydra.run.dir={tmp / 'run'}"]
    out = subprocess.run([sys.executable, "run.py", *([] if "--help" in args else where), *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{command}\n{out.stderr[-3000:]}"
    assert "Traceback" not in out.stderr and "chunklab: error" not in out.stderr, out.stderr[-3000:]
    if "--help" in args:
        assert "scheduler" in out.stdout and "engine" in out.stdout
        return out
    results = [line for line in out.stdout.splitlines() if re.match(r"budget +\d+:", line)]
    sweep = re.search(r"scheduler\.budget=(\S+)", command)
    assert len(results) == (len(sweep.group(1).split(",")) if "-m" in args else 1), out.stdout
    assert all("TTFT p50 n/a" not in line for line in results), results  # its requests were served
    return out


def env_with(tmp: Path, profiles: Path, store: Path) -> dict:
    env = dict(os.environ, CHUNKLAB_PROFILE_CACHE=str(profiles), CHUNKLAB_CALIBRATION="smoke",
               CHUNKLAB_CAPACITY_REQUESTS="60", MLFLOW_TRACKING_URI=f"sqlite:///{store}/mlflow.db")
    env.pop("CHUNKLAB_PROJECT_DIR", None)
    return env


def test_the_readme_lists_the_commands_this_test_runs():
    commands = readme_commands()
    assert len(commands) >= 10 and any("workload.load=" in c for c in commands)
    assert any(measured(c) for c in commands) and any(not measured(c) for c in commands)
    assert small("python run.py engine=simulated workload.num_requests=null -m") == \
        ["engine=simulated", f"workload.num_requests={NUM_REQUESTS}", "-m"]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """One MLflow store for the module's runs (a fresh store's schema takes seconds to create)."""
    return tmp_path_factory.mktemp("mlflow")


@pytest.mark.parametrize("command", [c for c in readme_commands() if not measured(c)])
def test_a_simulated_readme_command_runs_as_written(command, tmp_path, store):
    run_as_written(command, tmp_path, env_with(tmp_path, Path(os.environ["CHUNKLAB_PROFILE_CACHE"]), store))


def test_workload_load_on_a_measured_config_resolves_the_profile_first(tmp_path, monkeypatch, capfd):
    """The README's `workload.load=0.8` (here on the micro model): no profile of this machine yet, so
    prepare calibrates it once, then simulates the capacity on it; the config it returns carries the
    resolved profile and the rate."""
    monkeypatch.setenv("CHUNKLAB_PROFILE_CACHE", str(tmp_path / "profiles"))
    monkeypatch.setattr(load, "CAPACITY_REQUESTS", 60)  # its cache key says so: never a real run's capacity
    cfg = compose_run_config(["model=micro", "tracking=none", "workload.load=0.8"])
    assert capfd.readouterr().err.count("calibrating it now") == 1
    assert Path(cfg.engine.profile).parent == tmp_path / "profiles" and cfg.engine.executor == "torch"
    assert cfg.workload.load == 0.8 and cfg.workload.rate_per_s > 0


@pytest.mark.slow
def test_every_readme_command_runs_as_written_on_a_machine_with_no_profile(tmp_path):
    env = env_with(tmp_path, tmp_path / "profiles", tmp_path)
    calibrations = 0
    for command in readme_commands():
        calibrations += run_as_written(command, tmp_path, env).stderr.count("calibrating it now")
    assert calibrations == 1  # the first command that needed the profile; the rest reused it
