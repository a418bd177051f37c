"""Compose the real conf/ with overrides, outside a Hydra app (DVC stages, benchmarks, tests)."""
from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from chunklab.config import ConfigError, RunConfig
from chunklab.experiments.prepare import prepare
from chunklab.metrics.conditions import sim_conditions_line
from chunklab.paths import MARKER, project_dir
from chunklab.schema import error_line, register, to_run_config

def compose_run_config(overrides: list[str]) -> RunConfig:
    """The project's conf/ (chunklab.paths) composed with overrides, validated and prepared, as run.py does."""
    root = project_dir()
    if not (root / MARKER).is_file():
        raise ConfigError(f"no {MARKER} in {root} or above: run from a chunklab checkout (or set CHUNKLAB_PROJECT_DIR)")
    register()
    try:
        with initialize_config_dir(config_dir=str(root / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(error_line(err)) from None
    return prepare(to_run_config(cfg))


def simulated_conditions(overrides: list[str]) -> str:
    """The conditions line of a simulated run with these overrides (the sim_* tables' last line)."""
    return sim_conditions_line(compose_run_config(["engine=simulated", *overrides]))
