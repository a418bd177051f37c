"""Which machine a profile is true for.

A step-cost profile measures one machine running one version of the engine: the CPU,
how many cores and torch threads, the torch build, the forward path (fused C++ or eager),
the model's arithmetic and the engine's compute code, and whether the scheduling core runs
compiled (compiled_core.py: a step's Python overhead depends on it). The fingerprint records all of it;
two runs may share a profile only when their fingerprints are equal. Its id names the
per-machine cache file (calibration/machine.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from functools import cache
from pathlib import Path

from chunklab.compiled_core import core_kind
from chunklab.config import EngineConfig, ModelConfig
from chunklab.cost_models.linear import applies_to
from chunklab.metrics.conditions import cpu_model

SRC = Path(__file__).resolve().parents[1]
# The code a step's time depends on (the calibrate stage's deps): a change here is a new engine.
COMPUTE_SOURCES = ("model", "calibration", "engine/executors/model_runner.py", "engine/engine.py", "engine/scheduler.py",
                   "engine/block_manager.py", "engine/sequence.py", "cost_models/step_shape.py")
MACHINE_KEYS = ("cpu_model", "cpu_logical_cores", "torch_threads", "torch_version", "device", "forward_path", "core")
HARDWARE_KEYS = ("cpu_model", "cpu_logical_cores", "device")  # the rest are software or engine settings


@cache
def source_digest() -> str:
    digest = hashlib.sha256()
    for rel in COMPUTE_SOURCES:
        root = SRC / rel
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".cpp", ".h")) \
            if root.is_dir() else [root]
        for path in files:
            digest.update(str(path.relative_to(SRC)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def machine_identity() -> dict:
    """The machine alone, without the engine or the run (the `machine` DVC stage's output): equal
    on one machine across runs and checkouts, different on any machine whose timings may differ."""
    import torch

    from chunklab.engine.executors.model_runner import default_threads  # optional: torch

    return {"cpu_model": cpu_model(), "cpu_arch": platform.machine(), "cpu_logical_cores": os.cpu_count(),
            "torch_version": torch.__version__, "torch_threads": default_threads()}


def fingerprint(model: ModelConfig, engine: EngineConfig) -> dict:
    """This machine and software for a run of this model and engine (imports torch)."""
    import torch

    from chunklab.engine.executors.model_runner import planned_forward_path, torch_threads  # optional: torch

    return {"cpu_model": cpu_model(), "cpu_logical_cores": os.cpu_count(), "torch_threads": torch_threads(engine),
            "torch_version": torch.__version__, "device": engine.device,
            "forward_path": planned_forward_path(model, engine), "core": core_kind(), "source_digest": source_digest(),
            "applies_to": applies_to(model, engine)}


def fingerprint_id(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:12]


def describe(fp: dict) -> str:
    """One phrase naming the machine: 'AMD EPYC 7B13 (2 logical cores), 2 threads, torch 2.13.0+cpu, fused'."""
    return (f"{fp.get('cpu_model', '?')} ({fp.get('cpu_logical_cores', '?')} logical cores), "
            f"{fp.get('torch_threads', '?')} threads, torch {fp.get('torch_version', '?')}, "
            f"{fp.get('forward_path', '?')} forward, {fp.get('core', 'interpreted')} core")


def differences(a: dict, b: dict) -> list[str]:
    """The fingerprint keys where two profiles' machines differ ('source_digest' for another engine build)."""
    return [k for k in (*MACHINE_KEYS, "source_digest", "applies_to") if a.get(k) != b.get(k)]
