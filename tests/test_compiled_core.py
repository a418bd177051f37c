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


def test_a_build_missing_a_module_is_not_loaded_at_all(tmp_path, monkeypatch):
    """mypyc's modules of one build call each other natively: half a build must not run."""
    monkeypatch.setenv(compiled_core.ENV_DIR, str(tmp_path))
    partial = compiled_core.build_path()
    (partial / "chunklab").mkdir(parents=True)
    (partial / "complete").write_text(partial.name + "\n")
    for rel in compiled_core.MODULES[1:]:  # every module's file but the first
        (partial / "chunklab" / (rel.removesuffix(".py") + compiled_core.EXT_SUFFIX)).parent.mkdir(parents=True, exist_ok=True)
        (partial / "chunklab" / (rel.removesuffix(".py") + compiled_core.EXT_SUFFIX)).write_bytes(b"")
    assert compiled_core.install() is False


def test_the_digest_names_the_compiled_modules(monkeypatch):
    before = compiled_core.digest()
    monkeypatch.setattr(compiled_core, "MODULES", compiled_core.MODULES[1:])  # sequence.py: the scheduler imports it
    assert compiled_core.digest() != before


def test_a_source_that_does_not_parse_loads_no_build_and_the_build_names_it(source_copy):
    (source_copy / "config.py").write_text("def broken(:\n")
    assert compiled_core.install() is False
    line = compiled_core.build()
    assert line.startswith("compiled core: ") and "config.py:1: " in line and line.endswith("the core runs interpreted")
