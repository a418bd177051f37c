"""Scheduling policies: one class per file, registered by name (policies/base.py).

Importing the package imports every module in it, so a new policy is one new file here
(plus, to choose it from the command line by a group name, one YAML file in conf/scheduler/).
"""
from chunklab.engine.policies.base import (ADMISSIONS, BUDGETS, ORDERINGS, AdmissionPolicy, BudgetPolicy,
                                           OrderingPolicy, Part, StepTimePredictor, admission_policy, budget_policy,
                                           ordering_policy)
from chunklab.registry import import_package_modules

import_package_modules(__name__, __path__)

__all__ = ["ADMISSIONS", "BUDGETS", "ORDERINGS", "AdmissionPolicy", "BudgetPolicy", "OrderingPolicy", "Part",
           "StepTimePredictor", "admission_policy", "budget_policy", "ordering_policy"]
