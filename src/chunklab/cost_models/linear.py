"""The linear cost model of a calibrated profile (hardware.cost_model=profile).

A profile is data with its conditions, like a table: the linear model fit on the real engine's
steps (seconds = coefficients . FEATURES of the step's shape), the machine and software it was
measured on, and its error on held-out steps. It is read from a file (engine.profile: a path;
`auto`, this machine's, is resolved to one before a run builds its engine, by calibrating it
if need be: calibration/machine.py). Plain Python, no torch: a simulated run never imports
the model.
"""
from __future__ import annotations

import hashlib
import json
from operator import mul
from pathlib import Path
from chunklab.config import ConfigError, EngineConfig, HardwareConfig, ModelConfig
from chunklab.cost_models.base import COST_MODELS, Provenance
from chunklab.cost_models.step_shape import FEATURES, StepShape
from chunklab.paths import in_project

PROFILE_FORMAT = 2  # 2: fingerprinted, fit on probe shapes and serving replays


def applies_to(model: ModelConfig, engine: EngineConfig) -> dict:
    """What a profile must match to predict a run: the model's arithmetic, the cache layout and
    the forward path asked for (engine.compile: fused C++ kernels or eager ops)."""
    keys = ("vocab_size", "num_layers", "d_model", "num_heads", "num_kv_heads", "head_dim", "mlp_hidden",
            "dtype", "attention")
    return {k: getattr(model, k) for k in keys} | {"device": engine.device, "block_size": engine.block_size,
                                                   "compile": engine.compile}


AUTO = "auto"  # engine.profile: this machine's, resolved to a path before an engine is built


def profile_path(engine: EngineConfig) -> Path:
    """engine.profile as a path; a relative one is taken from the project directory (chunklab.paths)."""
    if engine.profile == AUTO:
        raise ConfigError("engine.profile='auto' was not resolved to this machine's profile before the engine was "
                          "built (chunklab.experiments.prepare does it: calibration.machine.resolve_profile)")
    return in_project(engine.profile)


class LinearCostModel:
    """seconds = coefficients . FEATURES of the step's shape."""

    def __init__(self, coefficients_s: tuple[float, ...], provenance: Provenance = Provenance()):
        self.coefficients_s = coefficients_s  # seconds per unit of each FEATURES entry
        self.provenance = provenance

    def predict(self, shape: StepShape) -> float:
        return self.predict_features(shape.features())

    def predict_features(self, features: list[float]) -> float:
        """The same sum, in the same order, as a loop over FEATURES."""
        return sum(map(mul, self.coefficients_s, features))

    @classmethod
    def from_profile(cls, doc: dict, digest: str = "") -> "LinearCostModel":
        if doc.get("format") != PROFILE_FORMAT or tuple(doc["model"]["features"]) != FEATURES:
            raise ConfigError(f"profile format {doc.get('format')!r} with features {doc.get('model', {}).get('features')}"
                              f" is not this version's ({PROFILE_FORMAT}, {list(FEATURES)}): calibrate it again "
                              "(`dvc repro calibrate`, or engine.profile=auto)")
        return cls(tuple(doc["model"]["coefficients_s"]), profile_provenance(doc, digest))


def profile_provenance(doc: dict, digest: str) -> Provenance:
    """Tags, conditions and phrase of a calibrated profile: where and when it was measured, and its
    error on serving steps the fit left out."""
    c, held = doc["conditions"], doc["held_out"]
    phrase = (f"profile {digest} (calibrated on {c['cpu_logical_cores']}x {c['cpu_model']}, torch "
              f"{c['torch_version']}, {c['torch_threads']} threads, {c.get('forward_path', 'eager')} forward, "
              f"{c['measured_at']}; held-out step-time error "
              f"median {held['median_rel_error']:.1%}, p90 {held['p90_rel_error']:.1%})")
    tags = ({"cost_model": "profile", "profile.digest": digest,
             "profile.held_out_median_rel_error": f"{held['median_rel_error']:.4f}",
             "profile.held_out_p90_rel_error": f"{held['p90_rel_error']:.4f}"}
            | {f"profile.{k}": str(v) for k, v in c.items()})
    conditions = {"device": f"simulated ({c['device']})", "torch_version": c["torch_version"],
                  "torch_build": c["torch_build"], "torch_threads": c["torch_threads"],
                  "profile_digest": digest, "profile_cpu_model": c["cpu_model"],
                  "profile_measured_at": c["measured_at"], "profile_git_commit": c["git_commit"],
                  "profile_forward_path": c.get("forward_path", "eager"),
                  "profile_held_out_error": f"median {held['median_rel_error']:.1%}, p90 {held['p90_rel_error']:.1%}",
                  "cost_model": phrase}
    return Provenance(digest, tags, conditions, phrase)


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


def load_cost_model(model: ModelConfig, engine: EngineConfig, required: bool) -> tuple[LinearCostModel | None, str]:
    """The profile's model when it applies to this run, else None and why.

    required (a simulated run): a missing or mismatched profile is a ConfigError.
    """
    path = profile_path(engine)
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
    return LinearCostModel.from_profile(doc, digest), ""


@COST_MODELS.register("profile")
def from_config(model: ModelConfig, engine: EngineConfig, hardware: HardwareConfig,
                required: bool) -> tuple[LinearCostModel | None, str]:
    """engine.profile's model (the hardware is the machine that profile measured)."""
    return load_cost_model(model, engine, required)
