"""Power of two choices: two distinct instances drawn at random (seeded: the same run draws the same),
the one with fewer outstanding requests takes the request (the first drawn on a tie)."""
import random

from chunklab.topology.routers.base import Router


class PowerOfTwo(Router):
    name = "power_of_two"

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self._rng = random.Random(seed)

    def choose(self, instances, request) -> int:
        if len(instances) == 1:
            return 0
        a, b = self._rng.sample(range(len(instances)), 2)
        return b if instances[b].outstanding_requests() < instances[a].outstanding_requests() else a
