"""Compose the real conf/ with overrides, outside a Hydra app (DVC stages, benchmarks, tests)."""
from __future__ import annotations

from chunklab.config import RunConfig
from chunklab.experiments.prepare import prepare
from chunklab.hydra_compose import compose_config
from chunklab.metrics.conditions import sim_conditions_line


def compose_run_config(overrides: list[str]) -> RunConfig:
    """The project's conf/ (chunklab.paths) composed with overrides, validated and prepared, as run.py does."""
    return prepare(compose_config(overrides))


def simulated_conditions(overrides: list[str]) -> str:
    """The conditions line of a simulated run with these overrides (the sim_* tables' last line)."""
    cfg = compose_run_config(["engine=simulated", *overrides])
    return sim_conditions_line(cfg.model, cfg.engine, cfg.hardware)
