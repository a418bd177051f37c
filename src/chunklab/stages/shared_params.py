"""The params.yaml (sub)sections more than one stage reads, typed once: `sim` (the four sim_*
stages, and the plots stage's captions) and a cost_models device (cost_models, and the plots
stage's fit figures). A section one stage owns lives in that stage's module."""
from __future__ import annotations

from chunklab.stages.typed_yaml import Section


@Section
class SimParams:
    seeds: list[int]
    num_requests: int
    processes: int
    overrides: list[str]


@Section
class VidurDevice:
    name: str  # the outputs' prefix: <name>_fit.json, <name>_operators.csv, <name>_points.csv, <name>_fit.png
    hardware: str  # the preset fit (conf/hardware/<hardware>.yaml)
    data: str  # Vidur's operator times of Llama-2-7B measured on that device
