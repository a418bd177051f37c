"""Cost models: a step's seconds from its shape. One interface (base.CostModel), one file each:

- profile (linear.py): the linear model of a profile calibrated on the real engine;
- roofline (roofline.py): the work of the forward pass priced at a device's spec sheet;
- scaled (scaled.py): another model's predictions times hardware.step_time_scale.

`hardware.cost_model` names the one a run uses: each file registers its factory in COST_MODELS
(base.py; chunklab.registry), and importing this package imports every file in it, so a new cost
model is one file here (plus, where a hardware preset uses it, that preset's YAML in conf/hardware/).
"""
from __future__ import annotations

from chunklab.config import EngineConfig, HardwareConfig, ModelConfig
from chunklab.cost_models.base import COST_MODELS, CostModel, Provenance
from chunklab.cost_models.linear import LinearCostModel
from chunklab.cost_models.roofline import RooflineCostModel
from chunklab.cost_models.scaled import ScaledCostModel
from chunklab.registry import import_package_modules

import_package_modules(__name__, __path__)


def cost_model_for(model: ModelConfig, engine: EngineConfig, hardware: HardwareConfig,
                   required: bool) -> tuple[CostModel | None, str]:
    """The run's cost model (hardware.cost_model, scaled by hardware.step_time_scale), else None
    and why (required: a ConfigError)."""
    base, why = COST_MODELS.get(hardware.cost_model)(model, engine, hardware, required)
    scale = hardware.step_time_scale
    return (ScaledCostModel(base, scale) if base is not None and scale != 1.0 else base), why


__all__ = ["COST_MODELS", "CostModel", "LinearCostModel", "Provenance", "RooflineCostModel", "ScaledCostModel",
           "cost_model_for"]
