"""Each DVC stage's code deps, derived from what its stage module imports, never kept by hand.

A stage's code is the module its cmd runs (`python -m chunklab.stages.<module>`) and every chunklab
module that one reaches through imports (module level or inside functions, so a lazily imported
torch path counts), plus:
- every module of a package whose __init__ imports its modules by discovery (engine/policies);
- the C++ sources next to a module that compiles them (model/csrc, built by model/native.py);
- the entry points a stage runs in a fresh process (EXTRA_ENTRIES: the perf stage times run.py).
Files are listed as their folder where the stage uses every file in it.

    python -m chunklab.stages.deps          # prints what dvc.yaml's deps should be, per stage
    python -m chunklab.stages.deps --write  # rewrites the src/chunklab deps of each stage in dvc.yaml
    make deps                               # the same --write, with the project's venv

tests/test_stage_deps.py fails when dvc.yaml differs (printing that command), so a stage never misses
a module it imports and a change to a module reruns only the stages that import it.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

from chunklab.paths import project_dir

SRC_PREFIX = "src/chunklab"
EXTRA_ENTRIES = {"perf": ("run.py",)}  # scripts the stage runs as subprocesses
COMPILED_SOURCES = {"model/native.py": "model/csrc"}  # a module -> the sources it builds at run time
DISCOVERS_MODULES = "import_package_modules(__name__, __path__)"  # an __init__ that imports every module beside it (chunklab.registry)
STAGE_CMD = re.compile(r"-m chunklab\.stages\.(\w+)")


def module_path(root: Path, name: str) -> Path | None:
    """chunklab.a.b -> src/chunklab/a/b.py or src/chunklab/a/b/__init__.py (None: not a chunklab module)."""
    parts = name.split(".")
    if parts[0] != "chunklab":
        return None
    base = root / "src" / Path(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_modules(path: Path) -> set[str]:
    """The chunklab modules a file imports, with the packages above them (importing a.b runs a/__init__)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from pkg import module`
    out = set()
    for name in names:
        parts = name.split(".")
        out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return {n for n in out if n.startswith("chunklab")}


def closure(root: Path, entries: list[Path]) -> set[Path]:
    """Every file under src/chunklab that the entry scripts reach."""
    seen: set[Path] = set()
    todo = list(entries)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if path.suffix != ".py":
            continue
        found = [module_path(root, name) for name in imported_modules(path)]
        todo += [p for p in found if p is not None]
        if path.name == "__init__.py" and DISCOVERS_MODULES in path.read_text():
            todo += sorted(path.parent.glob("*.py"))
        rel = path.relative_to(root / SRC_PREFIX).as_posix() if path.is_relative_to(root / SRC_PREFIX) else ""
        if rel in COMPILED_SOURCES:
            todo += sorted(p for p in (root / SRC_PREFIX / COMPILED_SOURCES[rel]).rglob("*") if p.is_file())
    return {p for p in seen if p.is_relative_to(root / SRC_PREFIX)}


def _code_files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def collapse(root: Path, files: set[Path]) -> list[str]:
    """Paths relative to the project: a folder where every file in it is used, else its files."""
    out: list[str] = []

    def walk(folder: Path) -> None:
        if _code_files(folder) <= files:
            out.append(folder.relative_to(root).as_posix())
            return
        for child in sorted(folder.iterdir()):
            if child.is_dir() and child.name != "__pycache__":
                if _code_files(child) & files:
                    walk(child)
            elif child in files:
                out.append(child.relative_to(root).as_posix())

    walk(root / SRC_PREFIX)
    return out


def stage_modules(dvc_yaml: str) -> dict[str, str]:
    """Stage name -> the chunklab.stages module its cmd runs (`-m chunklab.stages.<module>`)."""
    stages = yaml.safe_load(dvc_yaml).get("stages", {})
    found = {name: STAGE_CMD.search(str(stage.get("cmd", ""))) for name, stage in stages.items()}
    return {name: m.group(1) for name, m in found.items() if m}


def derived_deps(root: Path, dvc_yaml: str) -> dict[str, list[str]]:
    deps = {}
    for stage, module in stage_modules(dvc_yaml).items():
        entries = [root / SRC_PREFIX / "stages" / f"{module}.py"] + [root / e for e in EXTRA_ENTRIES.get(stage, ())]
        deps[stage] = collapse(root, closure(root, entries))
    return deps


def declared_deps(dvc_yaml: str) -> dict[str, list[str]]:
    """Each stage's src/chunklab deps as dvc.yaml lists them."""
    out: dict[str, list[str]] = {}
    stage = None
    for line in dvc_yaml.splitlines():
        if re.match(r"^  (\w+):\s*$", line):
            stage = line.strip()[:-1]
            out[stage] = []
        item = re.match(rf"^\s+- ({SRC_PREFIX}\S*)", line)
        if stage and item:
            out[stage].append(item.group(1))
    return out


def rewrite(dvc_yaml: str, deps: dict[str, list[str]]) -> str:
    """dvc.yaml with each stage's src/chunklab deps replaced by `deps`, placed where the first was
    (a stage that lists none yet: at the top of its `deps:`)."""
    declared = declared_deps(dvc_yaml)
    lines, stage, written = [], None, set()
    for line in dvc_yaml.splitlines():
        if re.match(r"^  (\w+):\s*$", line):
            stage = line.strip()[:-1]
        item = re.match(rf"^(\s+)- {SRC_PREFIX}", line)
        header = re.match(r"^(\s+)deps:\s*$", line)
        if stage in deps and item:
            if stage not in written:
                lines += [f"{item.group(1)}- {d}" for d in deps[stage]]
                written.add(stage)
            continue
        lines.append(line)
        if stage in deps and header and not declared.get(stage):
            lines += [f"{header.group(1)}  - {d}" for d in deps[stage]]
            written.add(stage)
    return "\n".join(lines) + "\n"


FIX = "make deps   (that is: .venv/bin/python -m chunklab.stages.deps --write, in the project's root)"


def mismatches(root: Path) -> dict[str, dict[str, list[str]]]:
    """Per stage whose dvc.yaml deps differ from its imports: the paths missing and those not imported."""
    text = (root / "dvc.yaml").read_text()
    derived, declared = derived_deps(root, text), declared_deps(text)
    return {stage: {"missing": sorted(set(paths) - set(declared.get(stage, []))),
                    "not imported": sorted(set(declared.get(stage, [])) - set(paths))}
            for stage, paths in derived.items() if sorted(paths) != sorted(declared.get(stage, []))}


if __name__ == "__main__":
    root = project_dir()
    text = (root / "dvc.yaml").read_text()
    derived = derived_deps(root, text)
    if "--write" in sys.argv[1:]:
        (root / "dvc.yaml").write_text(rewrite(text, derived))
    for stage, paths in derived.items():
        print(f"{stage}: {' '.join(paths)}")
