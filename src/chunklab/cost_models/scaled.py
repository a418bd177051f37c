"""Another cost model's predictions times a factor: the same device running slower (or faster)
than it did when the model was made (hardware.step_time_scale)."""
from __future__ import annotations

import hashlib

from chunklab.cost_models.base import CostModel, Provenance
from chunklab.cost_models.step_shape import StepShape


class ScaledCostModel:
    """Its digest, tags, conditions and phrase carry the factor, so a scaled run is never
    mistaken for one of the model as it is."""

    def __init__(self, base: CostModel, step_time_scale: float):
        self.base, self.step_time_scale = base, step_time_scale
        b, scale = base.provenance, f"{step_time_scale:.4g}"
        phrase = f"{b.phrase}, every step's prediction x{scale}"
        self.provenance = Provenance(
            digest=hashlib.sha256(f"{b.digest} x{step_time_scale!r}".encode()).hexdigest()[:12],
            tags=b.tags | {"cost_model.step_time_scale": scale},
            conditions=b.conditions | {"step_time_scale": scale, "cost_model": phrase},
            phrase=phrase)

    def predict(self, shape: StepShape) -> float:
        return self.step_time_scale * self.base.predict(shape)
