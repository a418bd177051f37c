"""The router interface and its Registry (chunklab.registry): defining a subclass registers it by its
`name`, the value of router.name / router.decode. A router sees the candidate instances through their public
load methods (Instance.outstanding_requests, outstanding_tokens) and returns one's position in the
list; it never changes them. Deterministic: ties go to the first, randomness comes from its seed."""
from __future__ import annotations

from typing import ClassVar, Protocol, Sequence

from chunklab.config import RouterConfig
from chunklab.engine.sequence import Request
from chunklab.registry import Registry

ROUTERS: Registry[type["Router"]] = Registry("router.name")


class Load(Protocol):
    """What a router may read of an instance (topology/instance.py: Instance)."""
    def outstanding_requests(self) -> int: ...
    def outstanding_tokens(self) -> int: ...


class Router:
    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        ROUTERS.add(cls.name, cls)

    def __init__(self, seed: int = 0):
        self.seed = seed

    def choose(self, instances: Sequence[Load], request: Request) -> int:
        """The position in `instances` (not empty) of the one that takes `request`."""
        raise NotImplementedError


def argmin(instances: Sequence[Load], key) -> int:
    """The first position of the smallest key."""
    return min(range(len(instances)), key=lambda i: (key(instances[i]), i))


def make_router(cfg: RouterConfig, decode: bool = False) -> Router:
    """router.name's router (decode: router.decode's, or router.name's when that is empty)."""
    key, name = ("router.decode", cfg.decode) if decode and cfg.decode else ("router.name", cfg.name)
    return ROUTERS.get(name, key)(cfg.seed)
