"""Shared by the stage scripts: params.yaml and the outputs/ layout."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ROOT / "outputs"
SIMULATED = OUTPUTS / "simulated"  # sim_* stages only: exact for the committed profile, machine-independent
MACHINE_PROFILE = "outputs/profiles/machine.json"  # the calibrate stage's: this machine (measured stages)
RUNS = ROOT / "runs" / "dvc"  # per-run folders of pipeline runs (ignored by git)


def params(stage: str) -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())[stage]


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
