"""The waiting sequence with the least prefill left (ties: the oldest)."""
from collections import deque

from chunklab.engine.policies.base import AdmissionPolicy
from chunklab.engine.sequence import Sequence


class ShortestPromptFirst(AdmissionPolicy):
    name = "shortest_prompt_first"

    def pick(self, waiting: deque[Sequence]) -> Sequence:
        return min(waiting, key=lambda s: s.num_prefill_remaining)
