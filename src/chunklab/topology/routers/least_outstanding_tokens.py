"""Least outstanding tokens: the instance with the fewest prefill tokens still to compute plus KV
tokens in use, as NVIDIA Dynamo's KV router prices a worker (first on a tie)."""
from chunklab.topology.routers.base import Router, argmin


class LeastOutstandingTokens(Router):
    name = "least_outstanding_tokens"

    def choose(self, instances, request) -> int:
        return argmin(instances, lambda inst: inst.outstanding_tokens())
