"""A cluster built from config (topology, router, link): its instances, in their roles, and the
routers that choose among them. topology.name chooses the builder (TOPOLOGIES, a Registry: a new
topology is one registered function here, plus its YAML in conf/topology/). The engines come from the caller's make_engine, so this module knows
no executor and no clock (the runner builds simulated engines; a measured cluster, its own)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from chunklab.topology.instance import Instance
from chunklab.topology.links import LinkModel
from chunklab.topology.routers import Router, make_router
from chunklab.config import EngineConfig, SchedulerConfig, ServingConfig
from chunklab.engine.engine import LLMEngine
from chunklab.engine.sequence import Request
from chunklab.registry import Registry

MakeEngine = Callable[[EngineConfig, SchedulerConfig], LLMEngine]


@dataclass
class Cluster:
    instances: list[Instance]  # every instance, in index order
    entry: list[Instance]  # the instances arrivals go to: the replicas, or the prefill pool
    decode: list[Instance]  # disaggregated: the decode pool (else empty)
    router: Router  # picks among `entry`
    decode_router: Router | None  # disaggregated: picks among `decode`
    link: LinkModel | None  # disaggregated: prices each KV transfer

    @property
    def disaggregated(self) -> bool:
        return bool(self.decode)

    def rejection_reason(self, request: Request) -> str:
        """Why no instance could ever serve it (every instance of a pool is configured alike)."""
        reason = self.entry[0].rejection_reason(request)
        if not reason and self.decode:
            reason = self.decode[0].rejection_reason(request)
        return reason


BuildCluster = Callable[[ServingConfig, MakeEngine], Cluster]
TOPOLOGIES: Registry[BuildCluster] = Registry("topology.name")


def build_cluster(serving: ServingConfig, make_engine: MakeEngine) -> Cluster:
    return TOPOLOGIES.get(serving.topology.name)(serving, make_engine)


@TOPOLOGIES.register("single")
@TOPOLOGIES.register("replicas")
def colocated(serving: ServingConfig, make_engine: MakeEngine) -> Cluster:
    """topology.replicas engines (single: one), each serving prefill and decode, behind the router."""
    n = serving.topology.replicas if serving.topology.name == "replicas" else 1
    replicas = [Instance(i, "replica", make_engine(serving.engine, serving.scheduler), f"replica{i}") for i in range(n)]
    return Cluster(replicas, replicas, [], make_router(serving.router), None, None)


@TOPOLOGIES.register("disaggregated")
def disaggregated(serving: ServingConfig, make_engine: MakeEngine) -> Cluster:
    """A prefill pool and a decode pool, the KV moved between them over the link."""
    t = serving.topology
    prefill_sched = dataclasses.replace(serving.scheduler, budget=t.prefill_budget or serving.scheduler.budget)
    decode_engine = dataclasses.replace(serving.engine, num_blocks=t.decode_num_blocks or serving.engine.num_blocks)
    prefill = [Instance(i, "prefill", make_engine(serving.engine, prefill_sched), f"prefill{i}") for i in range(t.prefill)]
    decode = [Instance(t.prefill + i, "decode", make_engine(decode_engine, serving.scheduler), f"decode{i}")
              for i in range(t.decode)]
    return Cluster(prefill + decode, prefill, decode, make_router(serving.router), make_router(serving.router, decode=True),
                   LinkModel.of(serving.link, serving.model))
