"""Routers: which instance an arrival (or, disaggregated, a prefilled sequence) goes to. One class per
file, registered by name (base.py); importing the package imports every file in it, so a new router
is one new file here (plus, to choose it by group name, one YAML file in conf/router/)."""
import importlib
import pkgutil

from chunklab.cluster.routers.base import ROUTERS, Router, make_router

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ROUTERS", "Router", "make_router"]
