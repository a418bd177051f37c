"""Instruction-set caps: this machine's engine run as a CPU with fewer vector extensions would run it.

An AVX-512 machine estimates an AVX2 laptop by capping every library a step's time goes through:
torch's own kernels (ATEN_CPU_CAPABILITY), oneDNN (ONEDNN_MAX_CPU_ISA), MKL (MKL_ENABLE_INSTRUCTIONS)
and the fused forward's kernels (CHUNKLAB_MARCH: built for that target, beside the native build). Each
library reads its cap once, when it loads, so a capped run is a fresh process started under the
environment `env_for` gives (`reexec_under` restarts the current command so).

A capped run is an estimate, not an AVX2 CPU: the cores, caches, memory and clock stay this
machine's; only the vector width and the instructions change.
"""
from __future__ import annotations

import os
import sys

import torch

from chunklab.config import ConfigError
from chunklab.model.native import MARCH

CAPS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
             "CHUNKLAB_MARCH": "x86-64-v3"},
}
KEYS = sorted({key for env in CAPS.values() for key in env})


def env_for(isa: str) -> dict[str, str]:
    """The environment variables of a cap; an unknown name is one line naming the known ones."""
    if isa not in CAPS:
        raise ConfigError(f"isa={isa!r}: must be one of {', '.join(CAPS)}")
    return CAPS[isa]


def current() -> str:
    """The cap this process runs under: a name of CAPS, or 'custom' where the variables match none."""
    set_here = {key: os.environ[key] for key in KEYS if key in os.environ}
    return next((name for name, env in CAPS.items() if env == set_here), "custom")


def reexec_under(isa: str, argv: list[str]) -> None:
    """Restarts this interpreter on argv (sys.argv's form: `-m module ...` or a script) under the cap,
    unless it already runs under it; a cap must be in place before torch and its libraries load."""
    env = env_for(isa)
    if current() == isa:
        return
    clean = {k: v for k, v in os.environ.items() if k not in KEYS}
    os.execve(sys.executable, [sys.executable, *argv], clean | env)


def describe() -> str:
    """What this process runs on: the cap, and what each library was told or picked."""
    cap = current()
    parts = [f"torch kernels {torch.backends.cpu.get_cpu_capability()}",
             f"oneDNN {os.environ.get('ONEDNN_MAX_CPU_ISA', 'uncapped')}",
             f"MKL {os.environ.get('MKL_ENABLE_INSTRUCTIONS', 'uncapped')}",
             f"fused kernels -march={MARCH}"]
    estimate = "; an estimate of such a CPU on this machine's cores and memory" if cap not in ("native", "custom") else ""
    return f"{cap} ({', '.join(parts)}){estimate}"
