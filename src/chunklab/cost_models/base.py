"""The cost model interface: a step's seconds from its shape, and nothing else.

A cost model predicts (`predict(shape)`); what it is and where its numbers come from is data
beside it (`provenance`), which the run's conditions, tags and table captions read. The engine
calls predict and nothing else. Plain Python, no torch.

A cost model is chosen by hardware.cost_model through COST_MODELS: each file of this package
registers a factory `(model, engine, hardware, required) -> (cost model or None, why)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from chunklab.config import EngineConfig, HardwareConfig, ModelConfig
from chunklab.cost_models.step_shape import StepShape
from chunklab.registry import Registry


@dataclass(frozen=True)
class Provenance:
    """What predicted a run's step times."""
    digest: str = ""  # identifies the predictions (capacity caches are keyed on it)
    tags: dict[str, str] = field(default_factory=dict)  # MLflow tags of a run it predicted or guarded
    conditions: dict[str, str] = field(default_factory=dict)  # a simulated run's: the device and software
    phrase: str = ""  # one phrase for a simulated table: what predicted the step times, and its error


class CostModel(Protocol):
    provenance: Provenance

    def predict(self, shape: StepShape) -> float:
        """Seconds the engine takes for a step of this shape (schedule, forward, postprocess)."""


# (model, engine, hardware, required) -> (the cost model, or None and why it cannot predict this run;
# required: a ConfigError instead of None)
CostModelFactory = Callable[[ModelConfig, EngineConfig, HardwareConfig, bool], tuple[Optional[CostModel], str]]
COST_MODELS: Registry[CostModelFactory] = Registry("hardware.cost_model")
