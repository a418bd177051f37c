"""What the coordinator of a measured cluster (topology/measured.py) and its instances' processes
(topology/worker.py) share: how an instance is specified, how its load looks to the routers, and the
error of an instance that died, how long each side waits for the other at the start and the stop,
and the names of the prefill pools' shared-memory segments. Plain Python."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from multiprocessing import shared_memory

from chunklab.topology.ledger import Ledger
from chunklab.config import ChunklabError, EngineConfig, ModelConfig, SchedulerConfig

READY_TIMEOUT_S = 300.0  # a worker builds its model (and, the first time, probes its GEMMs) before this
STOP_GRACE_S = 10.0  # workers told to stop have this long before they are terminated
# The coordinator sends "start" once every instance is ready, or "stop" when READY_TIMEOUT_S passes
# without; a worker still waiting for either STOP_GRACE_S later has a coordinator that no longer runs
# the run, and exits (non-zero, one line). Not shorter: a ready instance waits for the slowest to build.
START_TIMEOUT_S = READY_TIMEOUT_S + STOP_GRACE_S
SEGMENT_PREFIX = "chunklab_"  # every prefill pool's segment name starts so (/dev/shm/chunklab_... on Linux)


@dataclass(frozen=True)
class WorkerSpec:
    """What an instance's process is built from (topology/worker.py)."""
    index: int
    role: str
    name: str
    core: int  # the CPU it is pinned to
    model: ModelConfig
    engine: EngineConfig
    scheduler: SchedulerConfig
    shm_name: str = ""  # prefill: the segment its pool goes in, named by the coordinator (segment_name)
    start_timeout_s: float = START_TIMEOUT_S  # after "ready", the longest wait for "start"


def segment_name() -> str:
    """A fresh name for a prefill pool's segment. The coordinator picks it before the instance starts,
    so it can unlink the segment however the run ends, the instance killed before "ready" included."""
    return SEGMENT_PREFIX + secrets.token_hex(8)


def unlink_segment(name: str) -> bool:
    """Removes the named segment (mappings that processes hold stay valid until they exit); False when
    there is none."""
    try:
        seg = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        return False
    except ValueError:  # empty: its instance died between creating and sizing it, before any process
        try:  # mapped or registered it, so by name alone
            shared_memory._posixshmem.shm_unlink("/" + name)
        except FileNotFoundError:  # unlinked meanwhile by the other side
            return False
        return True
    seg.close()
    seg.unlink()  # (and tells the resource tracker, which registered the mapped segment)
    return True


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
