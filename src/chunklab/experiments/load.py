"""workload.load: an arrival rate given as a fraction of capacity, so the same command means
the same regime (idle, loaded, collapsing) on every machine.

Capacity here is the simulated capacity of this workload under the run's cost model and the
default scheduler (budget 512, decode_first, the run's max_num_seqs): the highest Poisson rate at which >= 90% of requests
meet the run's SLO, pooled over CAPACITY_SEEDS of CAPACITY_REQUESTS requests each, to 2%.
It is cached per (profile, workload, SLO, engine) in .cache/capacity/ (it takes ~30 s once).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from chunklab.config import RunConfig, SchedulerConfig
from chunklab.cost_models import cost_model_for
from chunklab.experiments.capacity import search
from chunklab.paths import in_project

CAPACITY_SEEDS = [1, 2]  # as the sim stages' (params.yaml sim.seeds): load 1.0 = their capacity
CAPACITY_REQUESTS = int(os.environ.get("CHUNKLAB_CAPACITY_REQUESTS", "2000"))  # fewer only in smoke tests
CAPACITY_TARGET = 0.9
CACHE_DIR = Path(".cache") / "capacity"  # in the project directory (chunklab.paths)


def reference_config(cfg: RunConfig) -> RunConfig:
    """What capacity is measured on: this workload and SLO, the default scheduler policy with the
    run's engine limit on running sequences (8 for TinyGPT, 256 on a GPU preset), simulated on the
    run's cost model (its profile resolved by experiments/prepare.py)."""
    return dataclasses.replace(cfg, scheduler=SchedulerConfig(max_num_seqs=cfg.scheduler.max_num_seqs),
                               slowdown=False,
                               engine=dataclasses.replace(cfg.engine, executor="simulated"))


def cache_key(ref: RunConfig, profile_digest: str) -> str:
    """ref: a reference_config."""
    w = dataclasses.asdict(ref.workload) | {"rate_per_s": None, "load": None, "seed": None, "num_requests": None}
    doc = {"profile": profile_digest, "workload": w, "slo": dataclasses.asdict(ref.slo),
           "model": dataclasses.asdict(ref.model), "engine": dataclasses.asdict(ref.engine) | {"profile": None},
           "scheduler": dataclasses.asdict(ref.scheduler), "seeds": CAPACITY_SEEDS,
           "requests": CAPACITY_REQUESTS, "target": CAPACITY_TARGET}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:16]


def workload_capacity(cfg: RunConfig) -> float:
    """Simulated capacity (req/s) of cfg's workload under the default scheduler; cached."""
    ref = reference_config(cfg)
    cost_model, _ = cost_model_for(ref.model, ref.engine, ref.hardware, required=True)
    path = in_project(CACHE_DIR) / f"{cache_key(ref, cost_model.provenance.digest)}.json"
    if path.is_file():
        return json.loads(path.read_text())["capacity_req_per_s"]
    ref = dataclasses.replace(ref, workload=dataclasses.replace(ref.workload, num_requests=CAPACITY_REQUESTS))
    found = search(ref, CAPACITY_SEEDS, CAPACITY_TARGET)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # parallel jobs may compute it at once: last rename wins
    tmp.write_text(json.dumps({"capacity_req_per_s": found.rate_req_per_s, "hi_req_per_s": found.hi_req_per_s,
                               "workload": cfg.workload.name, "probes": found.probes}, indent=1))
    tmp.replace(path)
    return found.rate_req_per_s


def resolve_load(cfg: RunConfig) -> RunConfig:
    """Sets workload.rate_per_s = load x capacity when workload.load is given (load is kept, for the record)."""
    if cfg.workload.load is None:
        return cfg
    rate = cfg.workload.load * workload_capacity(cfg)
    return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, rate_per_s=rate))
