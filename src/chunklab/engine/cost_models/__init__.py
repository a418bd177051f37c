"""Cost models: a step's seconds from its shape. One interface (base.CostModel), one file each:

- profile (linear.py): the linear model of a profile calibrated on the real engine;
- roofline (roofline.py): the work of the forward pass priced at a device's spec sheet;
- scaled (scaled.py): another model's predictions times hardware.step_time_scale.

`hardware.cost_model` names the one a run uses (COST_MODELS); a new one is a file here with a
`from_config(cfg, required) -> (model or None, why)` and a line in COST_MODELS.
"""
from __future__ import annotations

from chunklab.config import ConfigError, RunConfig
from chunklab.engine.cost_models import linear, roofline
from chunklab.engine.cost_models.base import CostModel, Provenance
from chunklab.engine.cost_models.linear import LinearCostModel
from chunklab.engine.cost_models.roofline import RooflineCostModel
from chunklab.engine.cost_models.scaled import ScaledCostModel

COST_MODELS = {"profile": linear.from_config, "roofline": RooflineCostModel.from_config}


def cost_model_for(cfg: RunConfig, required: bool) -> tuple[CostModel | None, str]:
    """The run's cost model (hardware.cost_model, scaled by hardware.step_time_scale), else None
    and why (required: a ConfigError)."""
    if cfg.hardware.cost_model not in COST_MODELS:
        raise ConfigError(f"hardware.cost_model={cfg.hardware.cost_model!r}: must be one of {', '.join(COST_MODELS)}")
    base, why = COST_MODELS[cfg.hardware.cost_model](cfg, required)
    scale = cfg.hardware.step_time_scale
    return (ScaledCostModel(base, scale) if base is not None and scale != 1.0 else base), why


__all__ = ["COST_MODELS", "CostModel", "LinearCostModel", "Provenance", "RooflineCostModel", "ScaledCostModel",
           "cost_model_for", "linear", "roofline"]
