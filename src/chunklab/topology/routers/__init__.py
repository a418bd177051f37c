"""Routers: which instance an arrival (or, disaggregated, a prefilled sequence) goes to. One class per
file, registered by name (base.py); importing the package imports every file in it, so a new router
is one new file here (plus, to choose it by group name, one YAML file in conf/router/)."""
from chunklab.topology.routers.base import ROUTERS, Router, make_router
from chunklab.registry import import_package_modules

import_package_modules(__name__, __path__)

__all__ = ["ROUTERS", "Router", "make_router"]
