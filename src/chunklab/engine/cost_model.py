"""Cost models: a step's seconds from its shape (the FEATURES the engine reads off its plan).

Two sit behind one interface (CostModel), chosen at construction by `hardware.cost_model`:
- profile (this file): the linear model of a profile calibrated on the real engine
  (outputs/profiles/cpu.json, or this machine's: engine.profile=auto). The profile is data
  with its conditions, like a table: the fitted model, the machine and software it was
  measured on, and its error on held-out steps.
- roofline (engine/roofline.py): the work of the forward pass priced at a device's spec sheet,
  at the efficiencies its hardware preset states (a GPU we cannot measure here).
The engine, scheduler, metrics and tracking do not know which one ran. Plain Python, no
torch: a simulated run never imports the model.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from operator import mul
from pathlib import Path
from typing import Protocol

from chunklab.config import ConfigError, EngineConfig, ModelConfig, RunConfig
from chunklab.engine.step_shape import FEATURES
from chunklab.paths import in_project

PROFILE_FORMAT = 2  # 2: fingerprinted, fit on probe shapes and serving replays


def applies_to(model: ModelConfig, engine: EngineConfig) -> dict:
    """What a profile must match to predict a run: the model's arithmetic, the cache layout and
    the forward path asked for (engine.compile: fused C++ kernels or eager ops)."""
    keys = ("vocab_size", "num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim", "mlp_hidden",
            "dtype", "attention")
    return {k: getattr(model, k) for k in keys} | {"device": engine.device, "block_size": engine.block_size,
                                                   "compile": engine.compile}


def profile_path(model: ModelConfig, engine: EngineConfig) -> Path:
    """engine.profile; a relative path is taken from the project directory (chunklab.paths).
    auto: this machine's, calibrated on first use (calibration/machine.py; imports torch)."""
    if engine.profile == "auto":
        from chunklab.calibration.machine import ensure_machine_profile

        return ensure_machine_profile(model, engine)
    return in_project(engine.profile)


class CostModel(Protocol):
    digest: str  # identifies the predictions (capacity caches are keyed on it)

    def predict_features(self, features: list[float]) -> float:
        """Seconds the engine takes for a step with these FEATURES (StepShape.features())."""

    def tags(self) -> dict[str, str]:
        """MLflow tags of a run it predicted or guarded: which cost model, from what data."""

    def run_conditions(self) -> dict[str, str]:
        """A simulated run's conditions: the device and software its predictions stand for."""

    def provenance(self) -> str:
        """One phrase for a simulated table: what predicted the step times, and its error."""


def cost_model_for(cfg: RunConfig, required: bool) -> tuple[CostModel | None, str]:
    """The run's cost model (hardware.cost_model, scaled by hardware.step_time_scale), else None
    and why (required: a ConfigError)."""
    if cfg.hardware.cost_model == "roofline":
        from chunklab.engine.roofline import RooflineCostModel

        base, why = RooflineCostModel.build(cfg), ""
    else:
        base, why = load_cost_model(cfg.model, cfg.engine, required)
    scale = cfg.hardware.step_time_scale
    return (ScaledCostModel(base, scale) if base is not None and scale != 1.0 else base), why


@dataclass(frozen=True)
class ScaledCostModel:
    """Another cost model's predictions times a factor: the same device running slower (or
    faster) than it did when the model was made. Its digest, tags, conditions and provenance
    carry the factor, so a scaled run is never mistaken for one of the model as it is."""
    base: CostModel
    step_time_scale: float

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.base.digest} x{self.step_time_scale!r}".encode()).hexdigest()[:12]

    def predict_features(self, features: list[float]) -> float:
        return self.step_time_scale * self.base.predict_features(features)

    def tags(self) -> dict[str, str]:
        return self.base.tags() | {"cost_model.step_time_scale": f"{self.step_time_scale:.4g}"}

    def run_conditions(self) -> dict[str, str]:
        return self.base.run_conditions() | {"step_time_scale": f"{self.step_time_scale:.4g}",
                                             "cost_model": self.provenance()}

    def provenance(self) -> str:
        return f"{self.base.provenance()}, every step's prediction x{self.step_time_scale:.4g}"


@dataclass(frozen=True)
class LinearProfile:
    """A calibrated profile's linear model: seconds = coefficients . FEATURES."""
    coefficients_s: tuple[float, ...]  # seconds per unit of each FEATURES entry
    digest: str  # of the profile file: which calibration predicted a run
    conditions: dict  # where and when the profile was measured
    held_out: dict  # its error on serving steps left out of the fit

    def predict_features(self, features: list[float]) -> float:
        """Seconds the engine takes for a step with these FEATURES (StepShape.features(): the engine
        reads them off the plan before it runs; schedule, forward and postprocess included)."""
        return sum(map(mul, self.coefficients_s, features))  # the same sum, in the same order, as a loop

    def tags(self) -> dict[str, str]:
        held = self.held_out
        return ({"cost_model": "profile", "profile.digest": self.digest,
                 "profile.held_out_median_rel_error": f"{held['median_rel_error']:.4f}",
                 "profile.held_out_p90_rel_error": f"{held['p90_rel_error']:.4f}"}
                | {f"profile.{k}": str(v) for k, v in self.conditions.items()})

    def run_conditions(self) -> dict[str, str]:
        c, held = self.conditions, self.held_out
        return {"device": f"simulated ({c['device']})", "torch_version": c["torch_version"],
                "torch_build": c["torch_build"], "torch_threads": c["torch_threads"],
                "profile_digest": self.digest, "profile_cpu_model": c["cpu_model"],
                "profile_measured_at": c["measured_at"], "profile_git_commit": c["git_commit"],
                "profile_forward_path": c.get("forward_path", "eager"),
                "profile_held_out_error": f"median {held['median_rel_error']:.1%}, p90 {held['p90_rel_error']:.1%}",
                "cost_model": self.provenance()}

    def provenance(self) -> str:
        c, held = self.conditions, self.held_out
        return (f"profile {self.digest} (calibrated on {c['cpu_logical_cores']}x {c['cpu_model']}, torch "
                f"{c['torch_version']}, {c['torch_threads']} threads, {c.get('forward_path', 'eager')} forward, "
                f"{c['measured_at']}; held-out step-time error "
                f"median {held['median_rel_error']:.1%}, p90 {held['p90_rel_error']:.1%})")

    @classmethod
    def from_profile(cls, doc: dict, digest: str = "") -> "LinearProfile":
        if doc.get("format") != PROFILE_FORMAT or tuple(doc["model"]["features"]) != FEATURES:
            raise ConfigError(f"profile format {doc.get('format')!r} with features {doc.get('model', {}).get('features')}"
                              f" is not this version's ({PROFILE_FORMAT}, {list(FEATURES)}): calibrate it again "
                              "(`dvc repro calibrate`, or engine.profile=auto)")
        return cls(tuple(doc["model"]["coefficients_s"]), digest, doc["conditions"], doc["held_out"])


def probe_only(doc: dict) -> dict:
    """The same profile with its probe-only fit as the model: what a run predicts without the
    serving replays in the fit (the fidelity stage's "before")."""
    return doc | {"model": doc["probe_only"], "held_out": doc["held_out_serving"]["probe only"]}


def read_profile(path: Path) -> tuple[dict, str]:
    try:
        raw = path.read_bytes()
        return json.loads(raw), hashlib.sha256(raw).hexdigest()[:12]
    except (OSError, ValueError) as err:
        raise ConfigError(f"engine.profile={str(path)!r}: cannot read a profile ({err.__class__.__name__})") from None


def load_cost_model(model: ModelConfig, engine: EngineConfig, required: bool) -> tuple[LinearProfile | None, str]:
    """The profile's model when it applies to this run, else None and why.

    required (a simulated run): a missing or mismatched profile is a ConfigError.
    """
    path = profile_path(model, engine)
    if not path.is_file():
        why = f"engine.profile={engine.profile!r}: no such file (run `dvc repro calibrate`)"
        if required:
            raise ConfigError(why)
        return None, why
    doc, digest = read_profile(path)
    want = applies_to(model, engine)
    diff = {k: (doc["applies_to"].get(k), v) for k, v in want.items() if doc["applies_to"].get(k) != v}
    if diff:
        key, (theirs, ours) = next(iter(diff.items()))
        why = f"engine.profile={engine.profile!r}: calibrated for {key}={theirs!r}, this run has {key}={ours!r}"
        if required:
            raise ConfigError(why)
        return None, why
    return LinearProfile.from_profile(doc, digest), ""
