"""Scheduling policies: one class per file, registered by name (policies/base.py).

Importing the package imports every module in it, so a new policy is one new file here
(plus, to choose it from the command line by a group name, one YAML file in conf/scheduler/).
"""
import importlib
import pkgutil

from chunklab.engine.policies.base import (ADMISSIONS, ORDERINGS, AdmissionPolicy, OrderingPolicy, Part,
                                           admission_policy, ordering_policy)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ADMISSIONS", "ORDERINGS", "AdmissionPolicy", "OrderingPolicy", "Part", "admission_policy",
           "ordering_policy"]
