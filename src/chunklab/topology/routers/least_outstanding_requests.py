"""Least outstanding requests: the instance holding the fewest unfinished requests (first on a tie)."""
from chunklab.topology.routers.base import Router, argmin


class LeastOutstandingRequests(Router):
    name = "least_outstanding_requests"

    def choose(self, instances, request) -> int:
        return argmin(instances, lambda inst: inst.outstanding_requests())
