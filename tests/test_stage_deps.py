"""Each DVC stage's src/chunklab deps are exactly what its stage module imports (chunklab/stages/deps.py)."""
import textwrap
from pathlib import Path

from chunklab.stages.deps import FIX, closure, collapse, declared_deps, derived_deps, mismatches, rewrite

ROOT = Path(__file__).resolve().parents[1]


def test_dvc_yaml_deps_are_the_stages_imports():
    wrong = mismatches(ROOT)
    assert not wrong, f"dvc.yaml's deps differ from the stages' imports ({wrong}). Fix: {FIX}"


def make_project(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, body in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
    return tmp_path


DVC = """\
stages:
  one:
    cmd: python -m chunklab.stages.one --out x
    deps:
      - data/x.csv
      - src/chunklab/a.py
  two:
    # a comment naming another module (python -m chunklab.stages.deps) is not the cmd
    cmd: >-
      python -m chunklab.stages.two
      --out y
    deps:
      - data/y.csv
  three:
    cmd: python -m chunklab.stages.one --out z
    deps:
      - data/z.csv
      - src/chunklab/a.py
"""


def test_a_stage_whose_deps_omit_a_module_it_imports_is_caught(tmp_path):
    root = make_project(tmp_path, {
        "src/chunklab/__init__.py": "",
        "src/chunklab/a.py": "def f():\n    from chunklab.b import g  # optional: a lazy import counts\n",
        "src/chunklab/b.py": "",
        "src/chunklab/pkg/__init__.py": "from chunklab.registry import import_package_modules\nimport_package_modules(__name__, __path__)\n",
        "src/chunklab/pkg/p.py": "",
        "src/chunklab/pkg/q.py": "import chunklab.a\n",
        "src/chunklab/unused.py": "",
        "src/chunklab/stages/one.py": "from chunklab.a import f\n",
        "src/chunklab/stages/two.py": "from chunklab import pkg\n",
        "dvc.yaml": DVC})
    derived = derived_deps(root, DVC)
    one = ["src/chunklab/__init__.py", "src/chunklab/a.py", "src/chunklab/b.py", "src/chunklab/stages/one.py"]
    assert derived["one"] == derived["three"] == one  # the stage module named in the cmd, and what it reaches
    # a package that imports its modules by discovery: all of them, and what they import
    assert derived["two"] == ["src/chunklab/__init__.py", "src/chunklab/a.py", "src/chunklab/b.py", "src/chunklab/pkg",
                              "src/chunklab/stages/two.py"]
    assert declared_deps(DVC)["one"] != derived["one"]  # b.py omitted: the check fails
    assert sorted(mismatches(root)) == ["one", "three", "two"]
    fixed = rewrite(DVC, derived)  # two listed none: written at the top of its deps
    assert declared_deps(fixed) == derived and "data/x.csv" in fixed and "--out x" in fixed
    assert fixed.index("      - data/y.csv") > fixed.index("      - src/chunklab/stages/two.py")
    (root / "dvc.yaml").write_text(fixed)
    assert mismatches(root) == {}


def test_a_folder_is_named_only_when_every_file_in_it_is_used(tmp_path):
    root = make_project(tmp_path, {"src/chunklab/__init__.py": "", "src/chunklab/d/__init__.py": "",
                                   "src/chunklab/d/x.py": "", "src/chunklab/d/y.py": ""})
    src = root / "src" / "chunklab"
    some = {src / "__init__.py", src / "d" / "__init__.py", src / "d" / "x.py"}
    assert collapse(root, some) == ["src/chunklab/__init__.py", "src/chunklab/d/__init__.py", "src/chunklab/d/x.py"]
    assert collapse(root, some | {src / "d" / "y.py"}) == ["src/chunklab"]
    assert closure(root, [src / "d" / "x.py"]) == {src / "d" / "x.py"}


def test_editing_the_report_or_its_figures_reruns_only_the_report_stages():
    """report/ (figures, tables, prose) is read by tables, plots and report alone: a measured or simulated
    stage never reruns because a caption or a colour changed."""
    derived = derived_deps(ROOT, (ROOT / "dvc.yaml").read_text())
    touching = {stage for stage, paths in derived.items()
                if any(p == "src/chunklab" or p.startswith("src/chunklab/report") for p in paths)}
    assert touching == {"tables", "plots", "report"}
