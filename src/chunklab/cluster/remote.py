"""What the coordinator of a measured cluster (cluster/measured.py) and its instances' processes
(cluster/worker.py) share: how an instance is specified, how its load looks to the routers, and the
error of an instance that died. Plain Python."""
from __future__ import annotations

from dataclasses import dataclass

from chunklab.cluster.ledger import Ledger
from chunklab.config import ChunklabError, EngineConfig, ModelConfig, SchedulerConfig


@dataclass(frozen=True)
class WorkerSpec:
    """What an instance's process is built from (cluster/worker.py)."""
    index: int
    role: str
    name: str
    core: int  # the CPU it is pinned to
    model: ModelConfig
    engine: EngineConfig
    scheduler: SchedulerConfig


class InstanceDied(ChunklabError):
    """An instance's process ended before the run did (the run's error: partial results are kept)."""


class RemoteLoad:
    """An instance's load as the routers read it (routers/base.py: Load), from the coordinator's books."""

    def __init__(self, name: str, ledger: Ledger):
        self.name, self._ledger = name, ledger
        self.reported_tokens = 0  # its last step's Instance.outstanding_tokens()
        self.tokens_since = 0  # prompt tokens sent to it since that report

    def outstanding_requests(self) -> int:
        return len(self._ledger.held_by(self.name))

    def outstanding_tokens(self) -> int:
        return self.reported_tokens + self.tokens_since
