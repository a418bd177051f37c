"""Where a command's project is: relative paths (profiles, conf/, caches, traces) resolve there.

The project is the checkout a command runs in, never the folder the chunklab package was
installed from: two copies of the project may share one environment (a git worktree with a
shared venv), and a non-editable install has no outputs/ beside the package at all.

    CHUNKLAB_PROJECT_DIR   set by run.py to its own folder (Hydra reads conf/ from there too)
    else                   the nearest folder from the current directory upwards that holds
                           conf/config.yaml (how DVC finds its repository)
    else                   the current directory
"""
from __future__ import annotations

import os
from pathlib import Path

PROJECT_ENV = "CHUNKLAB_PROJECT_DIR"
MARKER = Path("conf") / "config.yaml"


def project_dir() -> Path:
    if os.environ.get(PROJECT_ENV):
        return Path(os.environ[PROJECT_ENV]).resolve()
    cwd = Path.cwd().resolve()
    return next((d for d in (cwd, *cwd.parents) if (d / MARKER).is_file()), cwd)


def in_project(path: str | Path) -> Path:
    """path as given when absolute, else taken from the project directory."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else project_dir() / path
