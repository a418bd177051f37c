"""A validated RunConfig made concrete before anything is built or run: the KV pool sized from
the hardware's memory (engine.num_blocks=0), and workload.load as a rate (a fraction of the
workload's simulated capacity under this machine's profile, calibrated once if there is none).

run.py and compose_run_config call it on every config. (engine.profile=auto itself is resolved
where an engine is built, chunklab.runner: composing a config never calibrates unless its load
needs the profile.)
"""
from __future__ import annotations

from chunklab.config import RunConfig
from chunklab.engine.kv_pool import resolve_kv_pool
from chunklab.experiments.load import resolve_load


def prepare(cfg: RunConfig) -> RunConfig:
    return resolve_load(resolve_kv_pool(cfg))
