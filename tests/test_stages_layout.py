"""Thin stages: each pipelines/ script parses paths and calls chunklab.stages; each dvc.yaml cmd
names what the stage writes; params.yaml is read one typed way."""
import ast
import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chunklab.experiments import load
from chunklab.stages.params import ParamsError, load_params

ROOT = Path(__file__).resolve().parents[1]
MAX_SCRIPT_LINES = 60


def stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def declared(entries: list) -> list[str]:
    """Paths of a stage's outs or metrics list (each a path or {path: options})."""
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries]


def test_every_stage_script_is_short():
    long = {p.name: n for p in sorted((ROOT / "pipelines").glob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_SCRIPT_LINES}
    assert long == {}


@pytest.mark.parametrize("name", sorted(stages()))
def test_a_stage_cmd_names_every_path_it_writes(name):
    """Each out (and metrics file) is an argument of the cmd, itself or its folder (never the
    outputs/ root alone), so a script writes only where dvc.yaml says it does."""
    stage = stages()[name]
    args = set(shlex.split(stage["cmd"]))
    missing = [out for out in declared(stage.get("outs", []) + stage.get("metrics", []))
               if out not in args and (str(Path(out).parent) not in args or Path(out).parent == Path("outputs"))]
    assert missing == []


@pytest.mark.parametrize("name", sorted(stages()))
def test_a_stage_depends_on_its_script_and_the_stage_modules_it_runs(name):
    stage = stages()[name]
    script = next(a for a in shlex.split(stage["cmd"]) if a.startswith("pipelines/"))
    deps = [d.split()[0] for d in stage["deps"]]
    assert script in deps and (ROOT / script).is_file()
    module = f"src/chunklab/stages/{Path(script).name}"
    assert module in deps and (ROOT / module).is_file()
    assert "pipelines/common.py" not in deps


def test_no_chunklab_module_below_the_stages_imports_them():
    offenders = []
    for path in sorted((ROOT / "src" / "chunklab").rglob("*.py")):
        if "stages" in path.relative_to(ROOT / "src" / "chunklab").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("chunklab.stages")]
    assert offenders == []


def test_a_function_level_chunklab_import_in_the_stages_says_it_guards_an_optional_dependency():
    unmarked = []
    for path in sorted([*(ROOT / "src" / "chunklab" / "stages").glob("*.py"), *(ROOT / "pipelines").glob("*.py")]):
        lines = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    module = node.module if isinstance(node, ast.ImportFrom) else \
                        node.names[0].name if isinstance(node, ast.Import) else None
                    if module and module.startswith("chunklab") and "optional" not in lines[node.lineno - 1]:
                        unmarked.append(f"{path.name}:{node.lineno}")
    assert unmarked == []


def test_the_committed_params_load_typed():
    p = load_params(ROOT / "params.yaml")
    assert p.fidelity.budgets == [64, 512, 8192] and p.fidelity.loads[0] == 0.5 and p.sim_traces.num_requests is None
    assert p.perf.peer.serve_repeats == 2 and p.prefill_split.overrides == []  # given / its default
    assert isinstance(p.sim_tuning.load, float) and p.sim_production.published.slos[0].budget == 512


def test_load_one_is_the_capacity_the_sim_stages_search():
    """workload.load=1.0 (experiments/load.py) and the sim stages' capacity pool the same seeds."""
    assert load_params(ROOT / "params.yaml").sim.seeds == load.CAPACITY_SEEDS
    assert load_params(ROOT / "params.yaml").sim.num_requests == load.CAPACITY_REQUESTS


@pytest.mark.parametrize("section, key, value, message", [
    ("sim_maps", "loadz", [0.5], "sim_maps.loadz: unknown key (known: workloads, budgets, loads)"),
    ("sim_maps", "loads", [0.5, "high"], "sim_maps.loads[1]: expected float, got 'high'"),
    ("sim", "seeds", 3, "sim.seeds: expected list[int], got 3"),
    ("capacity", "target", True, "capacity.target: expected float, got True"),
    ("sim_traces", "num_requests", "all", "sim_traces.num_requests: expected int | None, got 'all'"),
])
def test_an_unknown_or_mistyped_key_is_a_one_line_error(tmp_path, section, key, value, message):
    doc = yaml.safe_load((ROOT / "params.yaml").read_text())
    doc[section][key] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert str(err.value) == f"{path}: {message}"


def test_a_missing_key_is_named_and_an_int_stands_for_a_float(tmp_path):
    doc = yaml.safe_load((ROOT / "params.yaml").read_text())
    del doc["capacity"]["rel_tol"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ParamsError, match=r"capacity\.rel_tol: missing$"):
        load_params(path)
    doc = yaml.safe_load((ROOT / "params.yaml").read_text())
    doc["sim_tuning"]["load"] = 1
    path.write_text(yaml.safe_dump(doc))
    tuning = load_params(path).sim_tuning
    assert tuning.load == 1.0 and isinstance(tuning.load, float)
    assert dataclasses.replace(tuning, n_trials=2).n_trials == 2


def test_a_stage_script_given_bad_params_stops_in_one_line_without_a_traceback(tmp_path):
    doc = yaml.safe_load((ROOT / "params.yaml").read_text())
    doc["sim_maps"]["budget"] = 512
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(doc))
    proc = subprocess.run([sys.executable, "pipelines/sim_maps.py", "--params", str(bad), "--profile", "outputs/profiles/machine.json", "--out", str(tmp_path / "maps"),
                           "--table", str(tmp_path / "maps.md")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {bad}: sim_maps.budget: unknown key (known: workloads, budgets, loads)"]
    assert not (tmp_path / "maps").exists()
