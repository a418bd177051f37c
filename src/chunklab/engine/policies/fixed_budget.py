"""The chapter's budget: scheduler.budget tokens, every step."""
from collections import deque

from chunklab.engine.policies.base import BudgetPolicy
from chunklab.engine.sequence import Sequence


class FixedBudget(BudgetPolicy):
    name = "fixed"

    def step_budget(self, running: list[Sequence], waiting: deque[Sequence]) -> int:
        return self.cfg.budget
