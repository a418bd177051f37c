"""First come, first served: the oldest waiting sequence (a preempted one goes back to the front)."""
from collections import deque

from chunklab.engine.policies.base import AdmissionPolicy
from chunklab.engine.sequence import Sequence


class FirstComeFirstServed(AdmissionPolicy):
    name = "fcfs"

    def pick(self, waiting: deque[Sequence]) -> Sequence:
        return waiting[0]
