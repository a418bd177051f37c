"""MLflow run names from what a sweep varies: `budget=64 seed=4`, not `unruly-swan-259`."""
from __future__ import annotations

from chunklab.config import LinkConfig, RouterConfig, RunConfig, TopologyConfig

SWEEP_KEYS_ENV = "CHUNKLAB_SWEEP_KEYS"  # set by the sweep's start callback, read by its jobs


def sweep_keys(task_overrides: list[str], sweeper_params: list[str]) -> list[str]:
    """Keys a sweep varies: command-line sweep overrides (a,b,c / range / choice) and the sweeper's params."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(task_overrides)
    keys = [o.key_or_group for o in parsed if o.is_sweep_override()]
    return list(dict.fromkeys(keys + list(sweeper_params)))


def run_name(cfg: RunConfig, job_overrides: list[str], varying: list[str], experiment: str | None) -> str:
    """In a sweep: each varying key's last part and this job's value; alone: the experiment's name
    (or the workload's). `(simulated)` marks runs whose times the cost model predicted."""
    values = dict(o.lstrip("+~").split("=", 1) for o in job_overrides if "=" in o)
    parts = [f"{key.split('.')[-1].split('/')[-1]}={values[key]}" for key in varying if key in values]
    name = " ".join(parts) or experiment or f"{cfg.workload.name} budget={cfg.scheduler.budget}"
    name = f"{name} {topology_label(cfg.topology, cfg.router, cfg.link)}".rstrip()
    return f"{name} (simulated)" if cfg.engine.executor == "simulated" else name


def topology_label(t: TopologyConfig, router: RouterConfig, link: LinkConfig) -> str:
    """'' for one engine; else the instances and the router (and the link of a P/D cluster)."""
    if t.name == "replicas":
        return f"{t.replicas} replicas {router.name}"
    if t.name == "disaggregated":
        return f"{t.prefill}P{t.decode}D {router.name} {link.name}"
    return ""
