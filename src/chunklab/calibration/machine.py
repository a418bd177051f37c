"""engine.profile=auto: this machine's profile, from a per-machine cache, calibrated on first use.

A profile is true for the machine that measured it (calibration/fingerprint.py). A measured
run predicts its steps (the noise guard) and resolves workload.load with the profile of the
machine it runs on: `auto` finds it in .cache/profiles/ (or $CHUNKLAB_PROFILE_CACHE) under its
fingerprint, or calibrates it there first (about two minutes for TinyGPT on 2 cores; one line
says so). A profile given by path is used as given; when a measured run's machine is not the
profile's, one line on stderr names both.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from chunklab.calibration.fingerprint import HARDWARE_KEYS, describe, differences, fingerprint, fingerprint_id
from chunklab.calibration.profile import CalibrationSettings, calibrate
from chunklab.config import EngineConfig, HardwareConfig, ModelConfig
from chunklab.cost_models.linear import AUTO, PROFILE_FORMAT, applies_to, profile_path
from chunklab.paths import in_project

CACHE_ENV = "CHUNKLAB_PROFILE_CACHE"
CACHE_DIR = Path(".cache") / "profiles"  # in the project directory (chunklab.paths)
# smoke: a few shapes and requests, for tests of the path (never as good as a real profile; its
# cache file is named apart, so a real run never picks it up)
SETTINGS_ENV = "CHUNKLAB_CALIBRATION"
_warned: set[str] = set()


def cache_dir() -> Path:
    return in_project(os.environ.get(CACHE_ENV) or CACHE_DIR)


def machine_profile_path(model: ModelConfig, engine: EngineConfig) -> Path:
    kind = os.environ.get(SETTINGS_ENV, "")
    suffix = f"-{kind}" if kind else ""
    return cache_dir() / f"{model.name}-{fingerprint_id(fingerprint(model, engine))}{suffix}.json"


def ensure_machine_profile(model: ModelConfig, engine: EngineConfig) -> Path:
    """This machine's profile for the model and engine: from the cache, or calibrated into it now."""
    path = machine_profile_path(model, engine)
    if path.is_file():
        return path
    settings = CalibrationSettings.smoke() if os.environ.get(SETTINGS_ENV) == "smoke" else CalibrationSettings()
    print(f"chunklab: engine.profile=auto: no profile of this machine for {model.name} "
          f"({describe(fingerprint(model, engine))}) in {path.parent}: calibrating it now (once; about three "
          "minutes for TinyGPT on 2 cores)", file=sys.stderr)
    write_profile(calibrate(model, engine, settings, show_progress=None).profile, path)
    return path


def resolve_profile(model: ModelConfig, engine: EngineConfig, hardware: HardwareConfig) -> EngineConfig:
    """engine.profile=auto as the path of this machine's profile (calibrated now if there is none),
    where the run's cost model reads a profile; any other value as given. Called by
    experiments/prepare.py alone: the one place a run's calibration may begin."""
    if engine.profile != AUTO or hardware.cost_model != "profile":
        return engine
    return dataclasses.replace(engine, profile=str(ensure_machine_profile(model, engine)))


def write_profile(doc: dict, path: Path) -> None:
    """Atomically: parallel processes may calibrate at once (the last rename wins, both are valid)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(path)


def warn_if_another_machine(model: ModelConfig, engine: EngineConfig) -> None:
    """One line when a measured run is given a profile of another machine (or engine build).
    Takes the run's engine before resolve_profile: engine.profile=auto is this machine's by definition."""
    if engine.profile == AUTO:
        return
    path = profile_path(engine)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # load_cost_model says why it cannot be used
    if doc.get("format") != PROFILE_FORMAT or doc.get("applies_to") != applies_to(model, engine):
        return  # not used at all (load_cost_model says why)
    ours = fingerprint(model, engine)
    theirs = doc.get("fingerprint", {})
    diff = differences(theirs, ours)
    if not diff or str(path) in _warned:
        return
    _warned.add(str(path))
    what = what_differs(diff)
    print(f"chunklab: engine.profile={engine.profile} is {what}'s ({describe(theirs)}; differs in "
          f"{', '.join(diff)}), this run measures on {describe(ours)}: its predictions and capacity are that "
          f"{what.removeprefix('another ')}'s (engine.profile=auto uses this one's)", file=sys.stderr)


def what_differs(diff: list[str]) -> str:
    """Names what a profile was measured on, from the fingerprint keys where it differs from this run:
    a machine only when the hardware differs (a forward path or thread count alone is this machine
    with another engine setting, as the perf stage's 'before' config is)."""
    if set(diff) & set(HARDWARE_KEYS):
        return "another machine"
    if set(diff) - {"source_digest"}:
        return "another engine setting"
    return "another engine build"
