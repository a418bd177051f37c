"""Builds every engine the project runs: runs, cluster workers, benchmarks, calibration and the speed
sentinel. `build_engine` is the one place an LLMEngine is constructed.

engine.executor chooses the executor and the clock that go together (EXECUTORS, a Registry):
- torch: the real forward pass (engine/executors/model_runner.py), timed by a wall or replay clock
  (engine.clock); its steps log their shapes, data a cost model can be fit on;
- simulated: no forward pass (engine/executors/simulated.py), a virtual clock moved by the cost
  model's prediction of each step.
The cost model is built by the caller (cost_models: cost_model_for) and passed in: the
engine only asks it to predict.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from chunklab.config import ConfigError, EngineConfig, ModelConfig, SchedulerConfig
from chunklab.engine.clock import SimClock, make_clock
from chunklab.cost_models import CostModel
from chunklab.engine.engine import Clock, Executor, LLMEngine
from chunklab.engine.executors.simulated import SimulatedExecutor
from chunklab.registry import Registry


def _torch_runner(model: ModelConfig, engine: EngineConfig) -> Executor:
    from chunklab.engine.executors.model_runner import ModelRunner  # optional: torch, for the real executor only

    return ModelRunner(model, engine)


def _torch_can_run(model: ModelConfig, engine: EngineConfig) -> None:
    from chunklab.engine.executors.model_runner import check_fits_in_memory, resolve_device  # optional: torch

    resolve_device(engine.device)
    check_fits_in_memory(model, engine)


@dataclass(frozen=True)
class ExecutorKind:
    make: Callable[[ModelConfig, EngineConfig], Executor]
    clock: Callable[[EngineConfig], Clock]
    # ConfigError (one line) where this machine cannot run it (no such device, too little memory):
    # asked before anything is calibrated or started
    can_run: Callable[[ModelConfig, EngineConfig], None]
    # True: real forward passes in real time; every step's shape goes in its record (a measured
    # run's steps.csv). False: the cost model is its clock, and it must have one.
    measured: bool


EXECUTORS: Registry[ExecutorKind] = Registry("engine.executor")
EXECUTORS.add("torch", ExecutorKind(_torch_runner, lambda e: make_clock(e.clock), _torch_can_run, measured=True))
EXECUTORS.add("simulated", ExecutorKind(lambda m, e: SimulatedExecutor(), lambda e: SimClock(), lambda m, e: None,
                                        measured=False))


def make_executor(model: ModelConfig, engine: EngineConfig) -> Executor:
    """The executor engine.executor names (torch: the model and its KV pool, built once; pass it
    to build_engine to share them between engines)."""
    return executor_kind(engine).make(model, engine)


def build_engine(model: ModelConfig, engine: EngineConfig, scheduler: SchedulerConfig,
                 cost_model: CostModel | None = None, executor: Executor | None = None,
                 clock: Clock | None = None) -> LLMEngine:
    """A fresh scheduler and block manager over `executor` (default: a new one of engine.executor),
    timed by `clock` (default: the one engine.executor and engine.clock name; a measured cluster's
    processes pass one clock of the whole machine)."""
    kind = executor_kind(engine)
    if cost_model is None and not kind.measured:
        raise ConfigError(f"engine.executor={engine.executor} needs a cost model: it is the run's clock")
    executor = executor if executor is not None else kind.make(model, engine)
    clock = clock if clock is not None else kind.clock(engine)
    return LLMEngine(model, engine, scheduler, clock, executor, cost_model, log_features=kind.measured)


def executor_kind(engine: EngineConfig) -> ExecutorKind:
    return EXECUTORS.get(engine.executor)
