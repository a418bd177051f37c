"""The one run path, for both executors: requests -> engine(s) -> replay -> records -> summary.

A measured run replays its requests through one engine on its clock (engine/replay.py). A simulated
run is a cluster on one virtual clock (topology/simulated.py): topology=single is its one-instance case,
the same steps and the same floats as the replay of one engine.

chunklab.app adds the run's files and MLflow around it; experiments/simulate.py runs it lean,
many times, for searches and maps. Neither writes the chain again.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from chunklab.topology.measured import MeasuredCluster
from chunklab.topology.phases import Placement
from chunklab.topology.simulated import simulate_cluster
from chunklab.topology.summary import cluster_summary
from chunklab.topology.cluster import Cluster, build_cluster
from chunklab.config import RunConfig, ServingConfig, SloConfig
from chunklab.engine.build import build_engine, executor_kind, make_executor
from chunklab.cost_models import CostModel, cost_model_for
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


@dataclass
class _Served:
    """What serving the requests left, before it is scored: each way of serving (one measured engine,
    a measured cluster, a simulated cluster) fills one, and _score turns every one into records and
    a summary the same way."""
    result: ReplayResult
    engine: LLMEngine  # the engine a request would meet alone (slowdown), and the run's conditions read
    num_chunked_prefills: int
    why_unguarded: str = ""
    cluster: Cluster | None = None
    placements: dict[int, Placement] | None = None
    extra: dict[str, float] = field(default_factory=dict)  # the cluster's own metrics
    lost: dict[int, str] = field(default_factory=dict)  # request_id -> the instance that died holding it


def engine_for(serving: ServingConfig) -> tuple[LLMEngine, str]:
    """The run's engine, and why no profile guards it (empty when one does, or when simulated).

    A measured run's profile predicts each step for the noise guard; a simulated run's cost model
    (hardware.cost_model: the profile, or the roofline of a spec sheet) is its clock. The profile
    was resolved by experiments/prepare.py."""
    s = serving
    kind = executor_kind(s.engine)
    executor = make_executor(s.model, s.engine)
    cost_model, why_none = cost_model_for(s.model, s.engine, s.hardware, required=not kind.measured)
    return build_engine(s.model, s.engine, s.scheduler, cost_model, executor), why_none


def simulated_cluster(serving: ServingConfig) -> Cluster:
    """The run's cluster (topology, router, link) of simulated engines, all on the run's cost model."""
    cost_model: CostModel = cost_model_for(serving.model, serving.engine, serving.hardware, required=True)[0]
    return build_cluster(serving, lambda engine, scheduler: build_engine(serving.model, engine, scheduler, cost_model))


def execute(cfg: RunConfig, warmup: bool = True, slowdown: bool = False, on_requests=None, on_done=None,
            should_stop=None) -> Executed:
    """warmup: one short request first, so a measured run does not pay torch's first calls.
    slowdown: after the run, each request's latency alone on the idle engine (metrics/isolation.py).
    on_requests(n): told how many requests the run has; on_done(n) and should_stop() as for replay()."""
    requests, trace_stats = make_requests(cfg.workload, cfg.model)
    if on_requests:
        on_requests(len(requests))
    serving = cfg.serving
    if not executor_kind(serving.engine).measured:
        served = _serve_simulated(serving, requests, warmup, on_done, should_stop)
    elif serving.topology.name != "single":
        served = _serve_measured_cluster(serving, requests, on_done, should_stop)
    else:
        served = _serve_measured(serving, requests, warmup, on_done, should_stop)
    return _score(cfg.slo, requests, trace_stats, served, slowdown)


def _score(slo: SloConfig, requests: list[Request], trace_stats, served: _Served, slowdown: bool) -> Executed:
    """The one path from a served run to its records and summary (scored under slo)."""
    result = served.result
    records = [record(s) for s in result.sequences]
    records = [dataclasses.replace(r, reason=f"instance {served.lost[r.request_id]} died; {r.reason}")
               if r.request_id in served.lost else r for r in records]
    if slowdown and not result.stopped:  # alone on one idle engine of the pool arrivals go to
        records = with_slowdown(records, IsolatedLatency.measure(served.engine, requests))
    summary = summarize(records, result.steps, result.makespan_s, slo, served.num_chunked_prefills)
    summary |= served.extra
    return Executed(requests, served.engine, result, records, summary, trace_stats, served.why_unguarded,
                    served.cluster, served.placements)


def _serve_measured(serving: ServingConfig, requests: list[Request], warmup: bool, on_done, should_stop) -> _Served:
    engine, why_unguarded = engine_for(serving)
    if warmup:
        engine.warmup()
    result = replay(engine, requests, on_done=on_done, should_stop=should_stop)
    return _Served(result, engine, engine.scheduler.stats().num_chunked_prefills, why_unguarded)


def _serve_simulated(serving: ServingConfig, requests: list[Request], warmup: bool, on_done, should_stop) -> _Served:
    cluster = simulated_cluster(serving)
    if warmup:
        for inst in cluster.instances:
            inst.engine.warmup()
    run = simulate_cluster(cluster, requests, on_done=on_done, should_stop=should_stop)
    num_chunked = sum(inst.engine.scheduler.stats().num_chunked_prefills for inst in cluster.instances)
    extra = cluster_summary(cluster, run.result, run.placements) if serving.topology.name != "single" else {}
    return _Served(run.result, cluster.entry[0].engine, num_chunked, "", cluster, run.placements, extra)


def _serve_measured_cluster(serving: ServingConfig, requests: list[Request], on_done, should_stop,
                            on_started=None) -> _Served:
    """One process per instance, each on its own core (topology/measured.py); every instance warms up
    in its process. No per-instance profile guards the steps (each runs on one thread)."""
    measured = MeasuredCluster(serving)
    run = measured.run(requests, on_done=on_done, should_stop=should_stop, on_started=on_started)
    cluster = measured.cluster
    stats = [measured.stats_of(inst.index) for inst in cluster.instances]
    extra = cluster_summary(cluster, run.result, run.placements)
    for inst, st in zip(cluster.instances, stats):  # the stand-ins schedule nothing: the workers' counts
        extra[f"instance_{inst.name}_preemptions"] = st.num_preemptions
    # the coordinator (this process, unpinned) takes this much of the instances' cores while serving
    extra["coordinator_cpu_s"] = measured.coordinator_cpu_s
    extra["coordinator_cpu_share"] = (measured.coordinator_cpu_s / measured.coordinator_wall_s
                                      if measured.coordinator_wall_s else 0.0)
    why = "measured cluster: each instance runs on one thread, which no profile of this machine predicts"
    return _Served(run.result, cluster.instances[0].engine, sum(s.num_chunked_prefills for s in stats), why,
                   cluster, run.placements, extra, dict(measured.lost))
