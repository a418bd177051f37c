"""A cluster run's own metrics, beside the run's summary (metrics/summary.py): each request's phases
(phases.py) as distributions, the KV moved, and each instance's share of the work, keyed
`instance_<name>_<metric>` (MLflow logs them with the rest)."""
from __future__ import annotations

import numpy as np

from chunklab.topology.phases import PHASES, Placement, phase_seconds
from chunklab.topology.cluster import Cluster
from chunklab.engine.replay import ReplayResult
from chunklab.metrics.summary import distribution


def cluster_summary(cluster: Cluster, result: ReplayResult, placements: dict[int, Placement]) -> dict[str, float]:
    out: dict[str, float] = {"num_instances": len(cluster.instances)}
    phases = [phase_seconds(s, placements[s.seq_id]) for s in result.sequences]
    for name in PHASES:
        values = [p[name] for p in phases if p[name] is not None]
        out |= {k: v for k, v in distribution(name[:-2], values).items() if "_p90_" not in k and "_p95_" not in k}
    moved = [s for s in result.sequences if placements[s.seq_id].transfer_start_s is not None]
    out["num_transfers"] = len(moved)
    if cluster.link is not None:
        out["transfer_gb"] = sum(cluster.link.bytes(s.num_prompt_tokens) for s in moved) / 1e9
    makespan = result.makespan_s
    for inst in cluster.instances:
        col = inst.steps.arrays()
        busy = float(col["duration_s"].sum()) if len(inst.steps) else 0.0
        stats = inst.engine.scheduler.stats()
        p = f"instance_{inst.name}_"
        out |= {p + "routed": inst.num_routed, p + "steps": len(inst.steps), p + "busy_s": busy,
                p + "utilization": busy / makespan if makespan else 0.0, p + "preemptions": stats.num_preemptions,
                p + "prefill_tokens": int(np.sum(col["num_prefill_tokens"])),
                p + "decode_tokens": int(np.sum(col["num_decode_tokens"]))}
    routed = [inst.num_routed for inst in cluster.entry]
    out["entry_imbalance"] = max(routed) / (sum(routed) / len(routed)) if sum(routed) else 0.0
    return out
