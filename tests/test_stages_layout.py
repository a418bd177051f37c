"""A stage is a module (`python -m chunklab.stages.<stage>`, its params dataclass beside its code), a
dvc.yaml entry whose cmd names what it writes, and a params.yaml section read one typed way."""
import ast
import dataclasses
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chunklab.experiments import load
from chunklab.stages.capacity import CapacityParams
from chunklab.stages.deps import declared_deps, mismatches
from chunklab.stages.fidelity import FidelityParams
from chunklab.stages.perf import PerfParams
from chunklab.stages.prefill_split import PrefillSplitParams
from chunklab.stages.shared_params import SimParams
from chunklab.stages.sim_maps import SimMapsParams
from chunklab.stages.sim_production import SimProductionParams
from chunklab.stages.sim_traces import SimTracesParams
from chunklab.stages.sim_tuning import SimTuningParams
from chunklab.stages.typed_yaml import ParamsError, load_section

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
STAGE_MODULE = re.compile(r"-m chunklab\.stages\.(\w+)")


def stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]


def declared(entries: list) -> list[str]:
    """Paths of a stage's outs or metrics list (each a path or {path: options})."""
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries]


@pytest.mark.parametrize("name", sorted(stages()))
def test_a_stage_cmd_names_every_path_it_writes(name):
    """Each out (and metrics file) is an argument of the cmd, itself or its folder (never the
    outputs/ root alone), so a stage writes only where dvc.yaml says it does."""
    stage = stages()[name]
    args = set(shlex.split(stage["cmd"]))
    missing = [out for out in declared(stage.get("outs", []) + stage.get("metrics", []))
               if out not in args and (str(Path(out).parent) not in args or Path(out).parent == Path("outputs"))]
    assert missing == []


@pytest.mark.parametrize("name", sorted(stages()))
def test_a_stage_cmd_runs_a_stage_module_its_deps_name(name):
    stage = stages()[name]
    module = STAGE_MODULE.search(stage["cmd"])
    assert module, f"{name}: its cmd runs no `python -m chunklab.stages.<module>`"
    path = f"src/chunklab/stages/{module.group(1)}.py"
    assert path in [d.split()[0] for d in stage["deps"]] and (ROOT / path).is_file()
    assert "\ndef main(" in (ROOT / path).read_text()


def read_sections(path: Path) -> dict[str, str]:
    """Section name -> the dataclass a stage module's code passes with it to read_section."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "read_section" and len(node.args) >= 3:
            name, cls = node.args[1], node.args[2]
            if isinstance(name, ast.Constant) and isinstance(cls, ast.Name):
                found[name.value] = cls.id
    return found


def defined_sections(path: Path) -> set[str]:
    """The classes a module defines under the @Section decorator."""
    return {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)
            and any(getattr(d, "id", None) == "Section" for d in node.decorator_list)}


@pytest.mark.parametrize("name", sorted(n for n, s in stages().items() if "chunklab.stages.report" not in s["cmd"]))
def test_a_stage_module_reads_the_params_sections_its_entry_declares_with_its_own_dataclasses(name):
    """The sections a stage's main reads are those its dvc.yaml entry lists under params, each typed
    by a dataclass of the stage's own module (or shared_params.py, for a section several stages read)."""
    stage = stages()[name]
    path = ROOT / "src/chunklab/stages" / f"{STAGE_MODULE.search(stage['cmd']).group(1)}.py"
    read = read_sections(path)
    assert set(read) == {str(p).split(".")[0] for p in stage.get("params", [])}
    shared = defined_sections(ROOT / "src/chunklab/stages/shared_params.py")
    assert [cls for cls in read.values() if cls not in defined_sections(path) | shared] == []


def test_no_central_params_class_every_section_has_its_stage():
    """Each params.yaml section is read by some stage (its entry lists it), and no module types the
    whole file: a new stage edits its own module, never a central class."""
    assert not (ROOT / "src/chunklab/stages/params.py").exists()
    declared = {str(p).split(".")[0] for s in stages().values() for p in s.get("params", [])}
    assert declared == set(yaml.safe_load(PARAMS.read_text()))
    per_module = {p.name: defined_sections(p) for p in sorted((ROOT / "src/chunklab/stages").glob("*.py"))}
    owners = {}
    for module, classes in per_module.items():
        for cls in classes:
            owners.setdefault(cls, []).append(module)
    assert {cls: mods for cls, mods in owners.items() if len(mods) > 1} == {}  # each dataclass defined once


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
    for path in sorted((ROOT / "src" / "chunklab" / "stages").glob("*.py")):
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
    fidelity = load_section(PARAMS, "fidelity", FidelityParams)
    assert fidelity.budgets == [64, 512, 8192] and fidelity.loads[0] == 0.5
    assert load_section(PARAMS, "sim_traces", SimTracesParams).num_requests is None
    assert load_section(PARAMS, "perf", PerfParams).peer.serve_repeats == 2  # given
    assert load_section(PARAMS, "prefill_split", PrefillSplitParams).overrides == []  # its default
    assert isinstance(load_section(PARAMS, "sim_tuning", SimTuningParams).load, float)
    assert load_section(PARAMS, "sim_production", SimProductionParams).published.slos[0].budget == 512


def test_load_one_is_the_capacity_the_sim_stages_search():
    """workload.load=1.0 (experiments/load.py) and the sim stages' capacity pool the same seeds."""
    assert load_section(PARAMS, "sim", SimParams).seeds == load.CAPACITY_SEEDS
    assert load_section(PARAMS, "sim", SimParams).num_requests == load.CAPACITY_REQUESTS


@pytest.mark.parametrize("section, cls, key, value, message", [
    ("sim_maps", SimMapsParams, "loadz", [0.5], "sim_maps.loadz: unknown key (known: workloads, budgets, loads)"),
    ("sim_maps", SimMapsParams, "loads", [0.5, "high"], "sim_maps.loads[1]: expected float, got 'high'"),
    ("sim", SimParams, "seeds", 3, "sim.seeds: expected list[int], got 3"),
    ("capacity", CapacityParams, "target", True, "capacity.target: expected float, got True"),
    ("sim_traces", SimTracesParams, "num_requests", "all", "sim_traces.num_requests: expected int | None, got 'all'"),
    ("fidelity", FidelityParams, "trace", {"rows": 2}, "fidelity.trace.start_offset: missing"),
])
def test_an_unknown_or_mistyped_key_is_a_one_line_error(tmp_path, section, cls, key, value, message):
    doc = yaml.safe_load(PARAMS.read_text())
    doc[section][key] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ParamsError) as err:
        load_section(path, section, cls)
    assert str(err.value) == f"{path}: {message}"


def test_a_missing_section_or_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("sim: {}\n")
    with pytest.raises(ParamsError, match=rf"^{re.escape(str(path))}: sim_maps: missing$"):
        load_section(path, "sim_maps", SimMapsParams)
    with pytest.raises(ParamsError, match=r": unreadable: "):
        load_section(tmp_path / "absent.yaml", "sim", SimParams)


def test_a_missing_key_is_named_and_an_int_stands_for_a_float(tmp_path):
    doc = yaml.safe_load(PARAMS.read_text())
    del doc["capacity"]["rel_tol"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ParamsError, match=r"capacity\.rel_tol: missing$"):
        load_section(path, "capacity", CapacityParams)
    doc = yaml.safe_load(PARAMS.read_text())
    doc["sim_tuning"]["load"] = 1
    path.write_text(yaml.safe_dump(doc))
    tuning = load_section(path, "sim_tuning", SimTuningParams)
    assert tuning.load == 1.0 and isinstance(tuning.load, float)
    assert dataclasses.replace(tuning, n_trials=2).n_trials == 2


def test_a_stage_given_bad_params_stops_in_one_line_without_a_traceback(tmp_path):
    doc = yaml.safe_load(PARAMS.read_text())
    doc["sim_maps"]["budget"] = 512
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(doc))
    proc = subprocess.run([sys.executable, "-m", "chunklab.stages.sim_maps", "--params", str(bad), "--profile", "outputs/profiles/machine.json", "--out", str(tmp_path / "maps"),
                           "--table", str(tmp_path / "maps.md")], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {bad}: sim_maps.budget: unknown key (known: workloads, budgets, loads)"]
    assert not (tmp_path / "maps").exists()


def walkthrough() -> dict[str, str]:
    """docs/pipeline.md's "Adding a stage" code blocks, by the file each one's first line names."""
    text = (ROOT / "docs" / "pipeline.md").read_text().split("\n## Adding a stage\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"```\w+\n# ([\w./]+)[^\n]*\n(.*?)```", text, flags=re.S))


def add_documented_stage(root: Path) -> None:
    """A copy of the project's stage code, dvc.yaml and params.yaml at root, plus the walkthrough's three blocks."""
    blocks = walkthrough()
    assert sorted(blocks) == ["dvc.yaml", "params.yaml", "src/chunklab/stages/toy.py"]  # three files, no more
    shutil.copytree(ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (root / "src/chunklab/stages/toy.py").write_text(blocks["src/chunklab/stages/toy.py"])
    dvc = (ROOT / "dvc.yaml").read_text()
    assert dvc.count("\nstages:\n") == 1
    (root / "dvc.yaml").write_text(dvc.replace("\nstages:\n", "\nstages:\n" + blocks["dvc.yaml"] + "\n", 1))
    (root / "params.yaml").write_text((ROOT / "params.yaml").read_text() + blocks["params.yaml"])
    shutil.copy2(ROOT / "run.py", root / "run.py")  # the perf stage's deps read it (deps.EXTRA_ENTRIES)


def test_a_toy_stage_added_the_documented_way_loads_typed_derives_its_deps_and_runs(tmp_path, monkeypatch):
    root = tmp_path / "project"
    add_documented_stage(root)
    env = os.environ | {"PYTHONPATH": str(root / "src"), "CHUNKLAB_PROJECT_DIR": str(root)}
    # its params: typed by the module's own dataclass, an unknown key one line
    spec = importlib.util.spec_from_file_location("toy", root / "src/chunklab/stages/toy.py")
    toy = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "toy", toy)  # a dataclass resolves its annotations through its module
    spec.loader.exec_module(toy)
    p = load_section(root / "params.yaml", "toy", toy.ToyParams)
    assert p.values == [1.0, 2.0, 3.5] and isinstance(p.values[0], float) and p.scale == 2.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("toy: {values: [1], scal: 2}\n")
    with pytest.raises(ParamsError, match=r"bad\.yaml: toy\.scal: unknown key \(known: values, scale\)$"):
        load_section(bad, "toy", toy.ToyParams)
    # its deps: the check names the new stage until `make deps` (deps --write) derives them
    assert sorted(mismatches(root)) == ["toy"]
    subprocess.run([sys.executable, "-m", "chunklab.stages.deps", "--write"], cwd=root, env=env, check=True,
                   capture_output=True)
    assert mismatches(root) == {}
    assert {"src/chunklab/stages/toy.py", "src/chunklab/stages/common.py", "src/chunklab/stages/typed_yaml.py"} <= \
        set(declared_deps((root / "dvc.yaml").read_text())["toy"])
    # it runs alone, as its cmd says, and under dvc repro (the entry is valid DVC)
    cmd = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["toy"]["cmd"].split()
    assert cmd[:3] == [".venv/bin/python", "-m", "chunklab.stages.toy"]
    proc = subprocess.run([sys.executable, *cmd[1:]], cwd=root, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((root / "outputs/toy.json").read_text()) == {"total": 13.0}
    (root / "outputs/toy.json").unlink()
    (root / ".venv").symlink_to(Path(sys.executable).parents[1])
    dvc = str(root / ".venv" / "bin" / "dvc")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=root, env=env, check=True, capture_output=True)
    proc = subprocess.run([dvc, "repro", "toy"], cwd=root, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads((root / "outputs/toy.json").read_text()) == {"total": 13.0}
    assert "toy:" in (root / "dvc.lock").read_text()
