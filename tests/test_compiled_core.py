"""The scheduling core compiled with mypyc (compiled_core.py) against the same sources interpreted."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chunklab import compiled_core

SIMULATE = """
import json, sys
from chunklab.compiled_core import core_kind
from chunklab.experiments.compose import compose_run_config
from chunklab.experiments.simulate import simulate
cfg = compose_run_config(["engine=simulated", "tracking=none", "model=llama3_8b", "hardware=h100", "slo=production",
                          "workload=ch10_production", "workload.num_requests=120", "scheduler.budget=512"])
print(json.dumps({"core": core_kind(), "summary": simulate(cfg)}, sort_keys=True))
"""


def _simulated(switch: str) -> dict:
    done = subprocess.run([sys.executable, "-c", SIMULATE], capture_output=True, text=True, check=True,
                          env=os.environ | {compiled_core.ENV_SWITCH: switch})
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.skipif(not (compiled_core.build_path() / "complete").is_file(), reason="no compiled build of these sources (make core)")
def test_a_compiled_run_equals_the_interpreted_one_to_the_last_digit():
    compiled, interpreted = _simulated("1"), _simulated("0")
    assert (compiled["core"], interpreted["core"]) == ("compiled", "interpreted")
    assert compiled["summary"] == interpreted["summary"]


def test_a_build_of_other_sources_is_never_loaded(tmp_path, monkeypatch):
    monkeypatch.setenv(compiled_core.ENV_DIR, str(tmp_path))
    stale = tmp_path / "0123456789ab"  # a digest these sources do not have
    stale.mkdir()
    (stale / "complete").write_text("0123456789ab\n")
    assert compiled_core.build_path() != stale
    assert compiled_core.install() is False


def test_the_switch_turns_the_build_off(monkeypatch):
    monkeypatch.setenv(compiled_core.ENV_SWITCH, "0")
    assert compiled_core.install() is False


@pytest.fixture
def source_copy(tmp_path, monkeypatch):
    """A copy of the chunklab package that compiled_core reads as its sources."""
    import shutil
    copy = tmp_path / "chunklab"
    shutil.copytree(compiled_core.SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    monkeypatch.setattr(compiled_core, "SRC", copy)
    return copy


def test_the_digest_follows_what_the_compiled_modules_import_and_nothing_else(source_copy):
    before = compiled_core.digest()
    assert source_copy / "config.py" in compiled_core.sources()  # imported by the scheduler, not compiled
    with open(source_copy / "report" / "__init__.py", "a") as f:  # nothing compiled imports the report
        f.write("\n# an edit\n")
    assert compiled_core.digest() == before
    with open(source_copy / "config.py", "a") as f:
        f.write("\n# an edit\n")
    assert compiled_core.digest() != before


def test_a_build_missing_a_module_loads_that_module_interpreted(tmp_path):
    finder = compiled_core._Finder(tmp_path)  # an empty build folder
    assert finder.find_spec(compiled_core.module_name(compiled_core.MODULES[0])) is None
    assert finder.find_spec("chunklab.config") is None  # never compiled
