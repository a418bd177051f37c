"""Builds the engine a run config asks for: the executor, its clock and the cost model."""
from __future__ import annotations

from chunklab.config import RunConfig
from chunklab.engine.clock import SimClock, make_clock
from chunklab.engine.cost_model import cost_model_for
from chunklab.engine.engine import LLMEngine
from chunklab.engine.sim_executor import PlaceholderExecutor


def build_engine(cfg: RunConfig) -> tuple[LLMEngine, str]:
    """The engine, and why no profile guards it (empty when one does, or when simulated).

    A measured run's profile (engine.profile=auto: this machine's, calibrated on first use)
    predicts each step for the noise guard; a simulated run's cost model (hardware.cost_model:
    the profile, or the roofline of a spec sheet) is its clock."""
    if cfg.engine.executor == "simulated":
        cost_model, _ = cost_model_for(cfg, required=True)
        return LLMEngine(cfg.model, cfg.engine, cfg.scheduler, SimClock(), PlaceholderExecutor(), cost_model), ""
    from chunklab.calibration.machine import warn_if_another_machine
    from chunklab.engine.model_runner import ModelRunner  # torch: only for the real executor

    runner = ModelRunner(cfg.model, cfg.engine)  # first: a device that is not here fails before calibrating
    warn_if_another_machine(cfg)
    cost_model, why_none = cost_model_for(cfg, required=False)
    engine = LLMEngine(cfg.model, cfg.engine, cfg.scheduler, make_clock(cfg.engine.clock), runner, cost_model,
                       log_features=True)  # a measured run's steps.csv: data to fit cost models on
    return engine, why_none

