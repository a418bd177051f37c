"""The scheduler's three policy interfaces, and their registries.

A step is filled in three parts: the running sequences' decodes, the running prefills'
next chunks, and admissions from the waiting queue. A budget policy says how many tokens the
step may take; an ordering policy says in which order the parts spend them; an admission
policy says which waiting sequence is admitted next. Each policy is a class in its own file of
this package, named by `name` (the value of scheduler.budget_policy / scheduler.ordering /
scheduler.admission): defining the subclass registers it in its kind's Registry
(chunklab.registry), and the package imports every file in it. Plain Python, no torch.
"""
from __future__ import annotations

from collections import deque
from enum import Enum
from typing import Callable, ClassVar

from chunklab.config import ConfigError, SchedulerConfig
from chunklab.engine.sequence import Sequence
from chunklab.registry import Registry


class Part(Enum):
    """The parts of a step, each filled by the scheduler under the budget left."""
    DECODES = "decodes"  # one token for every running sequence that decodes
    PREFILLS = "prefills"  # the next chunk of every running prefill, oldest first
    ADMISSIONS = "admissions"  # waiting sequences admitted, each with its first chunk


ORDERINGS: Registry[type["OrderingPolicy"]] = Registry("scheduler.ordering")
ADMISSIONS: Registry[type["AdmissionPolicy"]] = Registry("scheduler.admission")
BUDGETS: Registry[type["BudgetPolicy"]] = Registry("scheduler.budget_policy")

# The seconds of a step that decodes one token for each of these contexts (cached tokens + 1) and
# prefills `prefill_tokens` tokens of one sequence with `cached_tokens` already cached. The run's
# cost model behind a plain callable (engine/engine.py builds it): the scheduling core imports none.
StepTimePredictor = Callable[[list[int], int, int], float]


class OrderingPolicy:
    """Which part of a step spends the budget first."""
    name: ClassVar[str]
    parts: ClassVar[tuple[Part, ...]]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        ORDERINGS.add(cls.name, cls)


class AdmissionPolicy:
    """Which waiting sequence is admitted next."""
    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        ADMISSIONS.add(cls.name, cls)

    def pick(self, waiting: deque[Sequence]) -> Sequence:
        """The next sequence to admit (waiting is not empty; the scheduler removes it)."""
        raise NotImplementedError


class BudgetPolicy:
    """How many tokens a step may take, decided when the step is planned."""
    name: ClassVar[str]
    needs_step_time: ClassVar[bool] = False  # True: built with the run's StepTimePredictor
    needs_gap_target: ClassVar[bool] = False  # True: reads scheduler.gap_target_s (set from the SLO when null)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        BUDGETS.add(cls.name, cls)

    def __init__(self, cfg: SchedulerConfig, step_time: StepTimePredictor | None = None):
        if self.needs_step_time and step_time is None:
            raise ConfigError(f"scheduler.budget_policy={self.name!r} predicts step times: it needs the run's "
                              "cost model (a measured run: engine.profile, calibrated for this machine)")
        if self.needs_gap_target and cfg.gap_target_s is None:
            raise ConfigError(f"scheduler.budget_policy={self.name!r} needs scheduler.gap_target_s: give it, or run "
                              "through experiments.prepare, which sets it from the SLO")
        self.cfg = cfg
        self.step_time = step_time

    def step_budget(self, running: list[Sequence], waiting: deque[Sequence]) -> int:
        """Tokens the next step may take (>= the running decodes). running: the running set, oldest
        admitted first; waiting: the queue. Both the scheduler's own: read them, never change them."""
        raise NotImplementedError

    def observe_step(self, measured_s: float, predicted_s: float) -> None:
        """After each step that the cost model priced: its seconds on the engine's clock and the
        cost model's prediction for it. A policy that plans on predictions may correct them."""


def budget_policy(cfg: SchedulerConfig, step_time: StepTimePredictor | None = None) -> BudgetPolicy:
    return BUDGETS.get(cfg.budget_policy)(cfg, step_time)


def ordering_policy(name: str) -> OrderingPolicy:
    return ORDERINGS.get(name)()


def admission_policy(name: str) -> AdmissionPolicy:
    return ADMISSIONS.get(name)()
