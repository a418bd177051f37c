"""A validated RunConfig made concrete before anything is built or run: the KV pool sized from
the hardware's memory (engine.num_blocks=0), workload.load as a rate (a fraction of the
workload's simulated capacity under this machine's profile, calibrated once if there is none),
and, where the cost model is the run's clock, engine.profile=auto as this machine's profile.

run.py and compose_run_config call it on every config. A measured run's profile=auto is resolved
where its engine is built (chunklab.runner), after its device is checked and its MLflow run has
started: composing a measured config never calibrates unless its load needs the profile.
"""
from __future__ import annotations

from chunklab.calibration.machine import resolve_profile
from chunklab.cluster.routers import ROUTERS
from chunklab.config import ConfigError, RunConfig
from chunklab.engine.build import EXECUTORS, executor_kind
from chunklab.engine.cost_models import COST_MODELS
from chunklab.engine.kv_pool import resolve_kv_pool
from chunklab.engine.policies import ADMISSIONS, ORDERINGS
from chunklab.experiments.load import resolve_load


def prepare(cfg: RunConfig) -> RunConfig:
    """A simulated run's engine.profile=auto becomes this machine's profile (calibrated once, if need
    be) here, once, so every later reader (the engine, the conditions, the load) sees the path it ran with."""
    check_choices(cfg)
    if not executor_kind(cfg.engine).measured:
        cfg = resolve_profile(cfg)
    return resolve_load(resolve_kv_pool(cfg))


def check_choices(cfg: RunConfig) -> None:
    """Each key that names a class is one its registry holds (a new policy, cost model or executor
    registers itself there: config.py does not list them)."""
    for key, value, registry in (("engine.executor", cfg.engine.executor, EXECUTORS),
                                 ("hardware.cost_model", cfg.hardware.cost_model, COST_MODELS),
                                 ("scheduler.ordering", cfg.scheduler.ordering, ORDERINGS),
                                 ("scheduler.admission", cfg.scheduler.admission, ADMISSIONS),
                                 ("router.name", cfg.router.name, ROUTERS),
                                 ("router.decode", cfg.router.decode or cfg.router.name, ROUTERS)):
        if value not in registry:
            raise ConfigError(f"{key}={value!r}: must be one of {', '.join(sorted(registry))}")
