"""A budget from queue pressure (the P-PAS rule; Saemann, arXiv 2608.15171, 2026, proposed to vLLM
as RFC 52906): the large budget (scheduler.budget) unless prefills compete with running decodes,
that is, at least two prefills are running or waiting while a decode runs; then the small one
(scheduler.pressure_budget_tokens). P-PAS switches vLLM's max_num_batched_tokens between two such
values (16384 and 1280 for its Nemotron runs). The rule reads counts only: no cost model."""
from collections import deque

from chunklab.engine.policies.base import BudgetPolicy
from chunklab.engine.sequence import Phase, Sequence


class LoadAdaptiveBudget(BudgetPolicy):
    name = "load_adaptive"

    def step_budget(self, running: list[Sequence], waiting: deque[Sequence]) -> int:
        decodes = prefills = 0
        for seq in running:
            if seq.phase is Phase.DECODING:
                decodes += 1
            elif seq.phase is Phase.PREFILLING:
                prefills += 1
        under_pressure = decodes > 0 and prefills + len(waiting) >= 2
        return self.cfg.pressure_budget_tokens if under_pressure else self.cfg.budget
