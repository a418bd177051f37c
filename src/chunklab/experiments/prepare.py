"""A validated RunConfig made concrete before anything is built or run, in one place for every run
(run.py, compose_run_config): each named choice checked against its registry, engine.profile=auto
as this machine's profile (calibrated once if there is none), the KV pool sized from the hardware's
memory (engine.num_blocks=0), a scaled SLO's multiples as seconds of this machine's step times
(experiments/slo.py), and workload.load as a rate (a fraction of the workload's simulated capacity
under that profile and SLO).

`prepare` is the single point where calibration may begin: nothing after it (the engine, the noise
guard, the conditions, the load) resolves a profile again, and an engine built from a config that
skipped it says so in one line.
"""
from __future__ import annotations

import dataclasses

from chunklab.calibration.machine import resolve_profile, warn_if_another_machine
from chunklab.topology.routers import ROUTERS
from chunklab.topology.cluster import TOPOLOGIES
from chunklab.config import EngineConfig, RunConfig, ServingConfig
from chunklab.engine.build import EXECUTORS, executor_kind
from chunklab.cost_models import COST_MODELS
from chunklab.engine.kv_pool import pool_blocks
from chunklab.engine.policies import ADMISSIONS, BUDGETS, ORDERINGS
from chunklab.experiments.load import resolve_load
from chunklab.experiments.slo import resolve_slo, with_gap_target


def prepare(cfg: RunConfig) -> RunConfig:
    check_choices(cfg.serving)
    kind = executor_kind(cfg.engine)
    kind.can_run(cfg.model, cfg.engine)  # a device that is not here fails before anything calibrates
    if kind.measured:
        warn_if_another_machine(cfg.model, cfg.engine)  # a profile given by path, of another machine: one line
    cfg = dataclasses.replace(cfg, engine=resolve_profile(cfg.model, cfg.engine, cfg.hardware))
    cfg = resolve_slo(dataclasses.replace(cfg, engine=with_kv_pool(cfg.serving)))
    return resolve_load(dataclasses.replace(cfg, scheduler=with_gap_target(cfg.scheduler, cfg.slo)))


def with_kv_pool(serving: ServingConfig) -> EngineConfig:
    """The engine, its engine.num_blocks=0 made the pool the hardware's memory holds (logged as the run's
    value)."""
    s = serving
    if s.engine.num_blocks:
        return s.engine
    return dataclasses.replace(s.engine, num_blocks=pool_blocks(s.model, s.engine, s.scheduler, s.hardware))


def check_choices(cfg: ServingConfig) -> None:
    """Each key that names an implementation is one its registry holds (chunklab.registry)."""
    EXECUTORS.check(cfg.engine.executor)
    COST_MODELS.check(cfg.hardware.cost_model)
    ORDERINGS.check(cfg.scheduler.ordering)
    ADMISSIONS.check(cfg.scheduler.admission)
    BUDGETS.check(cfg.scheduler.budget_policy)
    TOPOLOGIES.check(cfg.topology.name)
    ROUTERS.check(cfg.router.name)
    ROUTERS.check(cfg.router.decode or cfg.router.name, "router.decode")
