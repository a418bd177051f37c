"""Prefills first (in flight, then admissions); decodes get what is left of the budget."""
from chunklab.engine.policies.base import OrderingPolicy, Part


class PrefillFirst(OrderingPolicy):
    name = "prefill_first"
    parts = (Part.PREFILLS, Part.ADMISSIONS, Part.DECODES)
