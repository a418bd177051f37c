"""Static checks of issue 60's "one way to add a thing", by AST over src/chunklab (never tests/):

- build_engine (engine/build.py) is the only place an LLMEngine is constructed;
- the scheduling core, the executors and the cost models take the sub-configs they use, never the
  whole RunConfig, and the whole project takes RunConfig in at most MAX_RUNCONFIG_FUNCTIONS functions
  (59 before issue 60, 26 now, goal at most half; what builds engines and clusters takes ServingConfig,
  the system under test; what is left transforms the whole config (at_rate, resolve_*, with_*), runs it
  (execute, simulate, run_experiment) or describes it (conditions, run_name, cache_key));
- cost_models/ sits below engine/: it imports nothing of the engine, so a cost model is data and
  arithmetic, injected into the engine, never the other way round;
- every "must be one of" about a name that chooses a class comes from chunklab.registry.

Each check is a function over source text, tested both ways on a tiny source, then run on the project."""
from __future__ import annotations

import ast
from pathlib import Path

from test_structure import fail_with, rel

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "chunklab"
MAX_RUNCONFIG_FUNCTIONS = 29  # half of the 59 at issue 60's start
NO_RUNCONFIG = ("engine", "cost_models")  # the scheduling core, its executors and the cost models


def constructions(source: str, cls: str, where: str) -> list[str]:
    """Calls of cls(...) in the source."""
    return [f"{where}:{n.lineno}" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == cls]


def runconfig_functions(source: str, where: str) -> list[str]:
    """Functions with a parameter annotated with RunConfig (alone or in a union)."""
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]
            if any(a.annotation is not None and "RunConfig" in ast.unparse(a.annotation) for a in args):
                out.append(f"{where}:{n.lineno} {n.name}")
    return out


def chunklab_imports_of(source: str) -> set[str]:
    names = set()
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("chunklab"):
            names.add(n.module)
        elif isinstance(n, ast.Import):
            names |= {a.name for a in n.names if a.name.startswith("chunklab")}
    return names


def src_files(under: str = "") -> list[Path]:
    return sorted((PKG / under).rglob("*.py"))


def test_the_checkers_flag_what_they_should():
    assert constructions("e = LLMEngine(m, e, s)\nf = build(LLMEngine)\n", "LLMEngine", "x.py") == ["x.py:1"]
    src = "def a(cfg: RunConfig): ...\ndef b(m: ModelConfig, c: 'RunConfig | None' = None): ...\ndef c(x): ...\n"
    assert [o.split()[1] for o in runconfig_functions(src, "x.py")] == ["a", "b"]
    assert chunklab_imports_of("from chunklab.engine.scheduler import X\nimport chunklab.config\nimport os\n") == \
        {"chunklab.engine.scheduler", "chunklab.config"}


def test_build_engine_is_the_only_place_an_engine_is_constructed():
    found = [o for p in src_files() for o in constructions(p.read_text(), "LLMEngine", rel(p))]
    assert len(found) == 1 and found[0].startswith("src/chunklab/engine/build.py:"), \
        f"LLMEngine(...) constructed outside build_engine (engine/build.py): {found}"


def test_the_core_the_executors_and_the_cost_models_never_take_the_whole_run_config():
    found = {rel(p): runconfig_functions(p.read_text(), rel(p)) for p in src_files()}
    core = [o for path, offs in found.items() for o in offs
            if any(path.startswith(f"src/chunklab/{d}/") for d in NO_RUNCONFIG)]
    fail_with("functions of the scheduling core, the executors or the cost models taking RunConfig", core)
    total = sum(len(offs) for offs in found.values())
    assert total <= MAX_RUNCONFIG_FUNCTIONS, (
        f"{total} functions take the whole RunConfig (at most {MAX_RUNCONFIG_FUNCTIONS}): pass the sub-configs "
        "a function reads")


def test_cost_models_sit_below_the_engine():
    offenders = [f"{rel(p)}: {m}" for p in src_files("cost_models") for m in chunklab_imports_of(p.read_text())
                 if m.startswith(("chunklab.engine", "chunklab.calibration", "chunklab.topology", "chunklab.experiments"))]
    fail_with("cost_models/ imports a layer above it", offenders)


REGISTRY_KEYS = ("engine.executor", "hardware.cost_model", "scheduler.ordering", "scheduler.admission",
                 "scheduler.budget_policy", "router.",
                 "topology.name")


def test_an_unknown_class_name_is_refused_by_the_registry_alone():
    offenders = [f"{rel(p)}:{i}" for p in src_files() if p.name != "registry.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1)
                 if ("must be one of" in line or "_one_of(" in line) and any(k in line for k in REGISTRY_KEYS)]
    fail_with("a class name checked outside chunklab.registry", offenders)
