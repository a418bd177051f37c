"""The scheduling core compiled with mypyc: the same Python files, run as C.

A simulated run is nothing but this core's Python (schedule, postprocess, block tables, the
cost model's arithmetic), and a measured step pays it between forward passes. mypyc compiles
these typed, plain-Python modules unchanged into C extensions; a simulated run then takes
about 0.6x the time with the same results to the last digit (tests/test_compiled_core.py).

    build   `make core` (`make setup` and the targets that run code do it first): build(),
            mypyc into .cache/compiled_core/<digest>/ beside the sources (~40 s of gcc once);
            a no-op while that build exists
    use     chunklab/__init__.py installs a finder that loads MODULES from the build whose
            digest matches the sources this process would otherwise run, so an edited file
            runs interpreted (never a stale build) until the next build
    off     CHUNKLAB_COMPILED=0 runs every module interpreted (profiling, debugging)

The digest covers the bytes of the modules and of every chunklab module they import, transitively
(mypyc bakes what it inferred from those into the build: a changed config field must not run a
build that checks its old type), and the Python ABI. Which core a process runs is
`core_kind()`: the profile fingerprint names it, since a measured step's overhead depends on it.
A module joins MODULES only if mypyc compiles it as it stands and the tests pass compiled:
mypyc enforces annotations at run time and its classes take no new attributes.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent  # the chunklab package
MODULES = ("engine/sequence.py", "engine/block_manager.py", "engine/scheduler.py",
           "engine/executors/simulated.py", "topology/instance.py", "cost_models/roofline.py")
ENV_SWITCH = "CHUNKLAB_COMPILED"  # "0": interpreted
ENV_DIR = "CHUNKLAB_COMPILED_DIR"  # where builds live (default: .cache/compiled_core beside src/)
EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def module_name(rel: str) -> str:
    return "chunklab." + rel.removesuffix(".py").replace("/", ".")


def _imported(path: Path, tree: ast.Module) -> list[Path]:
    """The chunklab source files `path` imports (absolute and relative imports; a package's __init__)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:  # relative: from its own package
            package = path.parent
            for _ in range(node.level - 1):
                package = package.parent
            base = ".".join(("chunklab", *package.relative_to(SRC).parts, *([node.module] if node.module else [])))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] != "chunklab":
                continue
            for file in (SRC.joinpath(*parts[1:], "__init__.py"), SRC.joinpath(*parts[1:]).with_suffix(".py")
                         if len(parts) > 1 else SRC / "__init__.py"):
                if file.is_file():
                    found.append(file)
    return found


def sources() -> list[Path]:
    """MODULES and every chunklab module they import, transitively: what a build's behaviour depends on.
    Raises SyntaxError (naming the file) where one does not parse."""
    seen: set[Path] = set()
    todo = [SRC / rel for rel in MODULES]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(_imported(path, ast.parse(path.read_bytes(), filename=str(path))))
    return sorted(seen)


def digest() -> str:
    """Which modules are compiled, the sources they depend on, and the interpreter ABI: a build is for
    exactly these (one compiled without a module of MODULES, or with one more, is another build)."""
    h = hashlib.sha256(f"{sys.implementation.cache_tag}|{EXT_SUFFIX}|{'|'.join(MODULES)}".encode())
    for path in sources():
        h.update(str(path.relative_to(SRC)).encode() + path.read_bytes())
    return h.hexdigest()[:12]


def builds_root() -> Path:
    return Path(os.environ.get(ENV_DIR) or SRC.parent.parent / ".cache" / "compiled_core")


def build_path() -> Path:
    return builds_root() / digest()


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1") != "0"


class _Finder:
    """A meta-path finder for the compiled MODULES and the runtime library mypyc links them to."""

    def __init__(self, root: Path):
        self.files = {module_name(rel): root / "chunklab" / (rel.removesuffix(".py") + EXT_SUFFIX) for rel in MODULES}
        self.files.update({p.name.removesuffix(EXT_SUFFIX): p for p in root.glob(f"*__mypyc{EXT_SUFFIX}")})

    def find_spec(self, fullname, path=None, target=None):
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def install() -> bool:
    """Loads MODULES compiled from now on, where a build of these very sources exists (and the
    switch is on); returns whether it does. Called once, by chunklab/__init__.py."""
    if not enabled():
        return False
    try:
        root = build_path()
    except SyntaxError:  # a source that does not parse: its import reports it, as without a build
        return False
    finder = _Finder(root)
    # a build is loaded whole or not at all: mypyc's modules of one build call each other natively
    if not (root / "complete").is_file() or not all(f.is_file() for f in finder.files.values()):
        return False
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, finder)
    return True


def core_kind() -> str:
    """'compiled' when this process runs the compiled MODULES, else 'interpreted'."""
    module = sys.modules.get(module_name(MODULES[0]))
    if module is None:
        module = importlib.import_module(module_name(MODULES[0]))
    return "compiled" if str(getattr(module, "__file__", "")).endswith(EXT_SUFFIX) else "interpreted"


def build() -> str:
    """Builds MODULES into build_path() unless there; returns one line saying what happened. A build
    that fails leaves nothing behind: the interpreted core runs, as it would without mypyc."""
    try:
        target = build_path()
    except SyntaxError as err:
        return f"compiled core: {err.filename}:{err.lineno}: {err.msg}; the core runs interpreted"
    if (target / "complete").is_file():
        return f"compiled core: up to date ({target})"
    if importlib.util.find_spec("mypyc") is None:
        return "compiled core: mypyc not installed (pip install mypy); the core runs interpreted"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        script = ("import sys; from setuptools import setup; from mypyc.build import mypycify; "
                  "setup(name='chunklab_core', ext_modules=mypycify(sys.argv[1:], opt_level='3', "
                  f"target_dir={str(Path(tmp) / 'c')!r}), script_args=['-q', 'build_ext', '--build-lib', {str(Path(tmp) / 'lib')!r}, '--build-temp', {str(Path(tmp) / 'tmp')!r}])")
        done = subprocess.run([sys.executable, "-c", script, *(f"chunklab/{rel}" for rel in MODULES)],
                              cwd=SRC.parent, capture_output=True, text=True)
        if done.returncode != 0:  # mypy's type errors go to stdout, the compiler's to stderr
            lines = (done.stdout + "\n" + done.stderr).strip().splitlines() or ["no output"]
            first_error = next((line for line in lines if "error:" in line), lines[-1])
            return f"compiled core: mypyc failed ({first_error.strip()}); the core runs interpreted"
        (Path(tmp) / "lib" / "complete").write_text(digest() + "\n")
        try:
            os.rename(Path(tmp) / "lib", target)  # atomic: a concurrent build of the same digest wins once
        except OSError:
            pass
    for old in target.parent.iterdir():  # this interpreter's builds of earlier sources: never loaded again
        if (old.is_dir() and old != target and (old / "complete").is_file()
                and any(old.glob(f"*__mypyc{EXT_SUFFIX}"))):  # (another Python's builds are its own to keep)
            shutil.rmtree(old, ignore_errors=True)
    return f"compiled core: built {len(MODULES)} modules into {target}"
