"""Static checks of the code's shape, by AST (issue 51's "Layers that point one way" and "Thin stages").

Scanned: src/chunklab/**/*.py and run.py (never tests/). Each check is a small
function over source text, tested both ways on tiny synthetic sources below (a clean example passes,
a dirty one is flagged), then run on the project. Every failure lists its offenders as file:line.

- No chunklab import inside a function body (any nested def), unless a comment on the import's
  line(s) contains the word "optional" (it guards an optional heavy dependency: torch, matplotlib,
  mlflow...).
- The import graph between chunklab's subpackages has no cycle, and engine/ imports none of
  calibration, experiments, report, tracking, stages or app.
- No module outside engine/ assigns to a scheduler's or a sequence's attribute (see
  `state_writes` for the heuristic).
- Each stage module's `main` (its command line: parse paths, read params, call `run`) is at most
  25 lines.
"""
from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "chunklab"
MAX_MAIN_LINES = 25
ENGINE_MUST_NOT_IMPORT = ("calibration", "experiments", "report", "tracking", "stages", "app")


def project_files() -> list[Path]:
    return sorted(PKG.rglob("*.py")) + [ROOT / "run.py"]


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# -- chunklab imports ----------------------------------------------------------------------------

def chunklab_imports(tree: ast.AST) -> list[tuple[ast.stmt, list[str], bool]]:
    """Every import of chunklab in the tree: (node, the modules it names, whether it is inside a def).

    `import chunklab.a.b` names chunklab.a.b; `from chunklab.a import x` names chunklab.a.x (x may be
    a module or a name in chunklab.a; `node_of` only looks at the first part below chunklab, so it
    does not matter); `from chunklab import x` names chunklab.x. Relative imports are not
    followed: `relative_imports` lists them, and the project test fails on any.
    """
    found = []

    def visit(node: ast.AST, in_def: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_in_def = in_def or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names if a.name == "chunklab" or a.name.startswith("chunklab.")]
                if names:
                    found.append((child, names, in_def))
            elif isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level == 0 and (module == "chunklab" or module.startswith("chunklab.")):
                    found.append((child, [f"{module}.{a.name}" for a in child.names], in_def))
            visit(child, child_in_def)

    visit(tree, False)
    return found


def relative_imports(source: str, name: str = "<src>") -> list[str]:
    return [f"{name}:{n.lineno}: {ast.unparse(n)}" for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.ImportFrom) and n.level > 0]


def comments_by_line(source: str) -> dict[int, str]:
    comments: dict[int, str] = defaultdict(str)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] += tok.string
    return comments


def function_level_imports(source: str, name: str = "<src>") -> list[str]:
    """chunklab imports inside a function body whose line(s) carry no comment with the word `optional`."""
    tree = ast.parse(source)
    comments = comments_by_line(source)
    offenders = []
    for node, names, in_def in chunklab_imports(tree):
        if not in_def:
            continue
        text = " ".join(comments.get(n, "") for n in range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if not re.search(r"\boptional\b", text, re.IGNORECASE):
            offenders.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return offenders


# -- the import graph ----------------------------------------------------------------------------

def node_of(module: str) -> str | None:
    """chunklab.engine.scheduler -> engine; chunklab.app -> app; chunklab -> None (the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def file_node(path: Path, pkg: Path) -> str | None:
    parts = path.relative_to(pkg).with_suffix("").parts
    if parts == ("__init__",):
        return None
    return parts[0]


def import_edges(files: dict[str, tuple[str | None, str]]) -> dict[tuple[str, str], list[str]]:
    """{(from node, to node): ["file:line", ...]} over all chunklab imports, module- and function-level.

    files: {display name: (its node, its source)}. Edges within one node are dropped.
    """
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, (src_node, source) in files.items():
        if src_node is None:
            continue
        for node, modules, _ in chunklab_imports(ast.parse(source)):
            for target in {node_of(m) for m in modules} - {None, src_node}:
                edges[src_node, target].append(f"{name}:{node.lineno}")
    return edges


def cycles(edges) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each as a sorted list."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph[b]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(out)


def describe_cycle(component: list[str], edges) -> str:
    """A component as its edges, each with where it is imported: 'a -> b (x.py:3, ...)'."""
    lines = []
    for (a, b), where in sorted(edges.items()):
        if a in component and b in component:
            shown = ", ".join(where[:4]) + (f", +{len(where) - 4} more" if len(where) > 4 else "")
            lines.append(f"  {a} -> {b}  ({shown})")
    return f"cycle through {{{', '.join(component)}}}:\n" + "\n".join(lines)


def engine_back_arrows(edges) -> list[str]:
    return [f"engine -> {b}: {w}" for (a, b), where in sorted(edges.items())
            if a == "engine" and b in ENGINE_MUST_NOT_IMPORT for w in where]


# -- scheduler and sequence state ----------------------------------------------------------------

MUTATORS = {"append", "appendleft", "extend", "extendleft", "insert", "remove", "pop", "popleft", "clear",
            "add", "discard", "update", "sort", "reverse", "rotate", "__setitem__", "__delitem__"}
OWNER = re.compile(r"sched|seq", re.IGNORECASE)


def scheduler_and_sequence_fields(scheduler_src: str, sequence_src: str) -> set[str]:
    """The Scheduler's `self.X = ...` in any of its methods and the Sequence dataclass's fields, each
    also without its leading underscores (a private `_running` is still the scheduler's `running`)."""
    fields = set()
    for node in ast.walk(ast.parse(scheduler_src)):
        if isinstance(node, ast.ClassDef) and node.name == "Scheduler":
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef):
                    for stmt in ast.walk(fn):
                        targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                            [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
                        fields |= {t.attr for t in targets if isinstance(t, ast.Attribute)
                                   and isinstance(t.value, ast.Name) and t.value.id == "self"}
    for node in ast.walk(ast.parse(sequence_src)):
        if isinstance(node, ast.ClassDef) and node.name == "Sequence":
            fields |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                       and isinstance(s.target, ast.Name)}
    return fields | {f.lstrip("_") for f in fields}


def names_in(expr: ast.AST) -> list[str]:
    """The identifiers an object expression is spelled with: engine.scheduler -> [engine, scheduler]."""
    return [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(expr)
            if isinstance(n, (ast.Name, ast.Attribute))]


def state_writes(source: str, fields: set[str], name: str = "<src>") -> list[str]:
    """Writes to a scheduler's or a sequence's state, as "file:line: code".

    The heuristic (no types are inferred; an object counts as a scheduler or a sequence by its
    spelling or by the attribute written):
    - `X.a = ...`, `X.a += ...`, `X.a: T = ...`, `del X.a` and `X.a[i] = ...` are flagged when
      either X is spelled with a name containing "sched" or "seq" (`sched`, `engine.scheduler`,
      `seq`, `seqs[0]`, `sequence`), or `a` is a Scheduler or Sequence field (`fields`) and X is
      not `self`/`cls` (so another class may keep its own `self.cfg`, `self.running`...).
    - A mutating call (`append`, `appendleft`, `remove`, `clear`, `pop`, `extend`, ...) on `X.a`
      is flagged under the same two conditions: `sched.running.append(s)`,
      `engine.scheduler.waiting.clear()`, `s.block_table.append(0)`.
    - `setattr(X, ...)` with X spelled with "sched" or "seq".
    Reading any of these is fine.
    """
    def owned(x: ast.AST, attr: str) -> bool:
        spelled = names_in(x)
        if any(OWNER.search(n) for n in spelled):
            return True
        return attr in fields and not (isinstance(x, ast.Name) and x.id in ("self", "cls"))

    def target_attrs(t: ast.AST):
        if isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                yield from target_attrs(e)
        elif isinstance(t, ast.Starred):
            yield from target_attrs(t.value)
        elif isinstance(t, ast.Subscript):  # X.a[i] = ...: writes into X.a
            if isinstance(t.value, ast.Attribute):
                yield t.value
        elif isinstance(t, ast.Attribute):
            yield t

    offenders = []
    for node in sorted(ast.walk(ast.parse(source)), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        hit = any(owned(a.value, a.attr) for t in targets for a in target_attrs(t))
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in MUTATORS and isinstance(f.value, ast.Attribute):
                hit = owned(f.value.value, f.value.attr)
            elif isinstance(f, ast.Name) and f.id == "setattr" and node.args:
                hit = any(OWNER.search(n) for n in names_in(node.args[0]))
        if hit:
            offenders.append(f"{name}:{node.lineno}: {ast.unparse(node).splitlines()[0][:100]}")
    return offenders


# -- thin stages ---------------------------------------------------------------------------------

def long_mains(paths: list[Path], limit: int = MAX_MAIN_LINES) -> list[str]:
    """Each file's top-level `def main` longer than limit lines, as file:line: N lines."""
    out = []
    for p in paths:
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "main":
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{rel(p)}:{node.lineno}: main is {n} lines")
    return out


# == the checkers on tiny sources, both ways ======================================================

def src(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def test_function_level_import_checker():
    clean = src("""
        import chunklab.config
        from chunklab.engine import scheduler
        from chunklab import app

        def f():
            import json
            from chunklab.plots import figure  # matplotlib: optional, only when drawing
            from chunklab.model.native import (  # torch is Optional here
                load_extension)
            return json
        """)
    assert function_level_imports(clean) == []
    dirty = src("""
        import os

        class A:
            def m(self):
                def inner():
                    from chunklab.experiments.sentinel import SpeedSentinel  # torch: measured
                    import chunklab.calibration.machine
                    return SpeedSentinel
                return inner

        async def g():
            from chunklab import app  # not an optionality marker: "optionally"
            s = "# optional"; from chunklab.tracking import naming
            try:
                if s:
                    import chunklab.report
            except ImportError:
                pass
        """)
    assert function_level_imports(dirty, "x.py") == [
        "x.py:6: from chunklab.experiments.sentinel import SpeedSentinel",
        "x.py:7: import chunklab.calibration.machine",
        "x.py:12: from chunklab import app",
        "x.py:13: from chunklab.tracking import naming",
        "x.py:16: import chunklab.report",
    ]


def test_import_graph_checker(tmp_path):
    pkg = tmp_path / "chunklab"
    clean = {
        "__init__.py": "",
        "config.py": "import json\n",
        "engine/__init__.py": "",
        "engine/scheduler.py": "from chunklab.config import SchedulerConfig\nfrom chunklab.engine import sequence\n",
        "engine/sequence.py": "",
        "calibration/probe.py": "from chunklab.engine.scheduler import Scheduler\n",
        "app.py": "from chunklab import calibration, engine\n\ndef f():\n    from chunklab.tracking import x  # optional\n",
        "tracking/x.py": "import chunklab.config\n",
    }
    for name, text in clean.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    files = {rel(p): (file_node(p, pkg), p.read_text()) for p in sorted(pkg.rglob("*.py"))}
    assert file_node(pkg / "__init__.py", pkg) is None and file_node(pkg / "engine" / "x.py", pkg) == "engine"
    edges = import_edges(files)
    assert set(edges) == {("engine", "config"), ("calibration", "engine"), ("app", "calibration"),
                          ("app", "engine"), ("app", "tracking"), ("tracking", "config")}
    assert cycles(edges) == [] and engine_back_arrows(edges) == []
    # a back-arrow from a function body, and `from chunklab import x`: both count
    (pkg / "engine" / "build.py").write_text("def b():\n    from chunklab import calibration\n")
    (pkg / "config.py").write_text("def c():\n    from chunklab.app import f  # optional\n")
    files = {rel(p): (file_node(p, pkg), p.read_text()) for p in sorted(pkg.rglob("*.py"))}
    edges = import_edges(files)
    assert engine_back_arrows(edges) == [f"engine -> calibration: {rel(pkg / 'engine' / 'build.py')}:2"]
    # config -> app -> calibration -> engine -> config, and app -> tracking -> config
    assert cycles(edges) == [["app", "calibration", "config", "engine", "tracking"]]
    assert "engine -> calibration" in describe_cycle(cycles(edges)[0], edges)
    assert relative_imports("from . import x\nfrom chunklab import y\n", "r.py") == ["r.py:1: from . import x"]
    assert cycles({("a", "b"): [], ("b", "a"): [], ("c", "d"): [], ("d", "e"): [], ("e", "c"): [],
                   ("a", "c"): []}) == [["a", "b"], ["c", "d", "e"]]


SCHED_SRC = src("""
    class Scheduler:
        def __init__(self, cfg, block_manager):
            self.cfg = cfg
            self.running: list = []
            self._num_preemptions = 0
        def reconfigure(self, cfg):
            self._policy = cfg
    """)
SEQ_SRC = src("""
    @dataclass
    class Sequence:
        request: Request
        num_computed_tokens: int = 0
        block_table: list = field(default_factory=list)
        @property
        def seq_id(self): return 1
    """)


def test_state_write_checker():
    fields = scheduler_and_sequence_fields(SCHED_SRC, SEQ_SRC)
    assert fields == {"cfg", "running", "_num_preemptions", "num_preemptions", "_policy", "policy", "request",
                      "num_computed_tokens", "block_table"}
    clean = src("""
        class Tracker:
            def __init__(self, cfg):
                self.cfg = cfg            # its own field of the same name
                self.running = []
                self.running.append(1)
        n = engine.scheduler.num_preemptions     # reads are fine
        done = [s for s in sched.running if s.num_computed_tokens]
        sched.add(seq)
        plan = sched.schedule()
        engine.executor.mixed_batch = True       # not a scheduler or a sequence
        out.items.append(seq)                    # appends a sequence to something else
        seq_len = 4
        """)
    assert state_writes(clean, fields) == []
    dirty = src("""
        sched.cfg = cfg
        engine.scheduler.running.append(seq)
        seq.num_computed_tokens = 10
        for s in seqs:
            s.num_computed_tokens += 4
            s.block_table.append(0)
        self.scheduler.waiting.clear()
        seqs[0].phase = Phase.DECODING
        setattr(engine.scheduler, "cfg", cfg)
        probe_seq.block_table[0] = 3
        x.request: Request = r
        """)
    assert [o.split(":")[1] for o in state_writes(dirty, fields, "d.py")] == \
        [str(n) for n in (1, 2, 3, 5, 6, 7, 8, 9, 10, 11)]


def test_long_main_checker(tmp_path):
    body = "    x = 1\n"
    (tmp_path / "short.py").write_text("def main():\n" + body * (MAX_MAIN_LINES - 1))
    (tmp_path / "long.py").write_text("def run():\n" + body * 99 + "def main():\n" + body * MAX_MAIN_LINES)
    assert long_mains(sorted(tmp_path.glob("*.py"))) == [f"{tmp_path / 'long.py'}:101: main is 26 lines"]


# == the project ==================================================================================

def fail_with(title: str, offenders: list[str]) -> None:
    if offenders:
        pytest.fail(f"{title} ({len(offenders)}):\n" + "\n".join(offenders), pytrace=False)


def test_no_chunklab_import_inside_a_function_unless_marked_optional():
    offenders = [o for p in project_files() for o in function_level_imports(p.read_text(), rel(p))]
    fail_with("chunklab imports inside a function with no `# ... optional ...` comment", offenders)


def test_import_graph_has_no_cycle_and_engine_points_one_way():
    files = {rel(p): (file_node(p, PKG), p.read_text()) for p in sorted(PKG.rglob("*.py"))}
    edges = import_edges(files)
    assert ("engine", "config") in edges  # the graph is really built from the project
    problems = [f"relative import (the graph does not follow it): {o}"
                for name, (_, source) in files.items() for o in relative_imports(source, name)]
    problems += [describe_cycle(c, edges) for c in cycles(edges)]
    problems += [f"engine/ imports a layer above it: {line}" for line in engine_back_arrows(edges)]
    fail_with("import graph between chunklab subpackages", problems)


def test_no_module_outside_engine_writes_scheduler_or_sequence_state():
    engine = PKG / "engine"
    fields = scheduler_and_sequence_fields((engine / "scheduler.py").read_text(), (engine / "sequence.py").read_text())
    assert {"running", "waiting", "num_computed_tokens", "block_table"} <= fields  # parsed from the real classes
    offenders = [o for p in project_files() if not p.is_relative_to(engine)
                 for o in state_writes(p.read_text(), fields, rel(p))]
    fail_with("writes to a scheduler's or a sequence's state outside engine/ (use the scheduler's verbs)", offenders)


def test_stage_mains_are_thin():
    mains = sorted((PKG / "stages").glob("*.py"))
    assert sum("\ndef main(" in p.read_text() for p in mains) >= 15  # the stage modules are really scanned
    fail_with(f"stage modules whose main is longer than {MAX_MAIN_LINES} lines (move the work into run)",
              long_mains(mains))
