"""The one run path, for both executors: requests -> engine(s) -> replay -> records -> summary.

A measured run replays its requests through one engine on its clock (engine/replay.py). A simulated
run is a cluster on one virtual clock (cluster/simulated.py): topology=single is its one-instance case,
the same steps and the same floats as the replay of one engine.

chunklab.app adds the run's files and MLflow around it; experiments/simulate.py runs it lean,
many times, for searches and maps. Neither writes the chain again.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from chunklab.calibration.machine import resolve_profile, warn_if_another_machine
from chunklab.cluster.measured import MeasuredCluster
from chunklab.cluster.phases import Placement
from chunklab.cluster.simulated import simulate_cluster
from chunklab.cluster.summary import cluster_summary
from chunklab.cluster.topology import Cluster, build_cluster
from chunklab.config import RunConfig
from chunklab.engine.build import build_engine, executor_kind, make_executor
from chunklab.engine.cost_models import CostModel, cost_model_for
from chunklab.engine.engine import LLMEngine
from chunklab.engine.replay import ReplayResult, replay
from chunklab.engine.sequence import Request
from chunklab.metrics.isolation import IsolatedLatency, with_slowdown
from chunklab.metrics.records import RequestRecord, record
from chunklab.metrics.summary import summarize
from chunklab.workload import make_requests
from chunklab.workload.azure_trace import TraceStats


@dataclass
class Executed:
    requests: list[Request]
    engine: LLMEngine
    result: ReplayResult
    records: list[RequestRecord]
    summary: dict[str, float]
    trace_stats: TraceStats | None  # a trace workload's clipping and reordering counts
    why_unguarded: str  # a measured run without a profile to predict its steps: why ("" when guarded)
    cluster: Cluster | None = None  # a simulated run's instances (engine: the first one's)
    placements: dict[int, Placement] | None = None  # a simulated run's request_id -> instances, transfer times


def engine_for(cfg: RunConfig) -> tuple[LLMEngine, str]:
    """The run's engine, and why no profile guards it (empty when one does, or when simulated).

    A measured run's profile predicts each step for the noise guard; a simulated run's cost model
    (hardware.cost_model: the profile, or the roofline of a spec sheet) is its clock. Calibrates this
    machine first where engine.profile=auto finds no profile of it."""
    kind = executor_kind(cfg.engine)
    executor = make_executor(cfg.model, cfg.engine)  # first: a device that is not here fails before calibrating
    if kind.measured:
        warn_if_another_machine(cfg)
    cfg = resolve_profile(cfg)
    cost_model, why_none = cost_model_for(cfg, required=not kind.measured)
    return build_engine(cfg.model, cfg.engine, cfg.scheduler, cost_model, executor), why_none


def simulated_cluster(cfg: RunConfig) -> Cluster:
    """The run's cluster (topology, router, link) of simulated engines, all on the run's cost model."""
    cost_model: CostModel = cost_model_for(resolve_profile(cfg), required=True)[0]
    return build_cluster(cfg, lambda engine, scheduler: build_engine(cfg.model, engine, scheduler, cost_model))


def execute(cfg: RunConfig, warmup: bool = True, slowdown: bool = False, on_requests=None, on_done=None,
            should_stop=None) -> Executed:
    """warmup: one short request first, so a measured run does not pay torch's first calls.
    slowdown: after the run, each request's latency alone on the idle engine (metrics/isolation.py).
    on_requests(n): told how many requests the run has; on_done(n) and should_stop() as for replay()."""
    requests, trace_stats = make_requests(cfg)
    if on_requests:
        on_requests(len(requests))
    if not executor_kind(cfg.engine).measured:
        return _execute_simulated(cfg, requests, trace_stats, warmup, slowdown, on_done, should_stop)
    if cfg.topology.name != "single":
        return _execute_measured_cluster(cfg, requests, trace_stats, on_done, should_stop)
    engine, why_unguarded = engine_for(cfg)
    if warmup:
        engine.warmup()
    result = replay(engine, requests, on_done=on_done, should_stop=should_stop)
    records = [record(s) for s in result.sequences]
    if slowdown and not result.stopped:
        records = with_slowdown(records, IsolatedLatency.measure(engine, requests))
    summary = summarize(records, result.steps, result.makespan_s, cfg.slo, engine.scheduler.stats().num_chunked_prefills)
    return Executed(requests, engine, result, records, summary, trace_stats, why_unguarded)


def _execute_simulated(cfg: RunConfig, requests: list[Request], trace_stats, warmup: bool, slowdown: bool,
                       on_done, should_stop) -> Executed:
    cluster = simulated_cluster(cfg)
    if warmup:
        for inst in cluster.instances:
            inst.engine.warmup()
    run = simulate_cluster(cluster, requests, on_done=on_done, should_stop=should_stop)
    result = run.result
    records = [record(s) for s in result.sequences]
    if slowdown and not result.stopped:  # alone on one idle engine of the pool arrivals go to
        records = with_slowdown(records, IsolatedLatency.measure(cluster.entry[0].engine, requests))
    num_chunked = sum(inst.engine.scheduler.stats().num_chunked_prefills for inst in cluster.instances)
    summary = summarize(records, result.steps, result.makespan_s, cfg.slo, num_chunked)
    if cfg.topology.name != "single":
        summary |= cluster_summary(cluster, result, run.placements)
    return Executed(requests, cluster.instances[0].engine, result, records, summary, trace_stats, "", cluster,
                    run.placements)


def _execute_measured_cluster(cfg: RunConfig, requests: list[Request], trace_stats, on_done, should_stop,
                              on_started=None) -> Executed:
    """One process per instance, each on its own core (cluster/measured.py); every instance warms up
    in its process. No per-instance profile guards the steps (each runs on one thread)."""
    measured = MeasuredCluster(cfg)
    run = measured.run(requests, on_done=on_done, should_stop=should_stop, on_started=on_started)
    result, cluster = run.result, measured.cluster
    records = [record(s) for s in result.sequences]
    records = [dataclasses.replace(r, reason=f"instance {measured.lost[r.request_id]} died; {r.reason}")
               if r.request_id in measured.lost else r for r in records]
    stats = [measured.stats_of(inst.index) for inst in cluster.instances]
    summary = summarize(records, result.steps, result.makespan_s, cfg.slo, sum(s.num_chunked_prefills for s in stats))
    summary |= cluster_summary(cluster, result, run.placements)
    for inst, st in zip(cluster.instances, stats):  # the stand-ins schedule nothing: the workers' counts
        summary[f"instance_{inst.name}_preemptions"] = st.num_preemptions
    # the coordinator (this process, unpinned) takes this much of the instances' cores while serving
    summary["coordinator_cpu_s"] = measured.coordinator_cpu_s
    summary["coordinator_cpu_share"] = (measured.coordinator_cpu_s / measured.coordinator_wall_s
                                        if measured.coordinator_wall_s else 0.0)
    why = "measured cluster: each instance runs on one thread, which no profile of this machine predicts"
    return Executed(requests, cluster.instances[0].engine, result, records, summary, trace_stats, why, cluster,
                    run.placements)
