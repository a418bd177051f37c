"""Round robin: each request to the next instance in turn, whatever their load."""
from chunklab.topology.routers.base import Router


class RoundRobin(Router):
    name = "round_robin"

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self._next = 0

    def choose(self, instances, request) -> int:
        i = self._next % len(instances)
        self._next = i + 1
        return i
