"""The scheduler's two policy interfaces, and their registries.

A step is filled in three parts: the running sequences' decodes, the running prefills'
next chunks, and admissions from the waiting queue. An ordering policy says in which order
the parts spend the step's token budget; an admission policy says which waiting sequence is
admitted next. Each policy is a class in its own file of this package, named by `name`
(the value of scheduler.ordering / scheduler.admission): defining the subclass registers it in
its kind's Registry (chunklab.registry), and the package imports every file in it. Plain Python,
no torch.
"""
from __future__ import annotations

from collections import deque
from enum import Enum
from typing import ClassVar

from chunklab.engine.sequence import Sequence
from chunklab.registry import Registry


class Part(Enum):
    """The parts of a step, each filled by the scheduler under the budget left."""
    DECODES = "decodes"  # one token for every running sequence that decodes
    PREFILLS = "prefills"  # the next chunk of every running prefill, oldest first
    ADMISSIONS = "admissions"  # waiting sequences admitted, each with its first chunk


ORDERINGS: Registry[type["OrderingPolicy"]] = Registry("scheduler.ordering")
ADMISSIONS: Registry[type["AdmissionPolicy"]] = Registry("scheduler.admission")


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


def ordering_policy(name: str) -> OrderingPolicy:
    return ORDERINGS.get(name)()


def admission_policy(name: str) -> AdmissionPolicy:
    return ADMISSIONS.get(name)()
