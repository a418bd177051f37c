"""The one way a config key chooses a class: a Registry per kind of variant, filled by the variants.

Every key that names an implementation (engine.executor, hardware.cost_model, scheduler.ordering,
scheduler.admission, router.name, topology.name) has one Registry. A variant is one file in its
kind's package that registers itself when imported (`@REGISTRY.register("name")`, or a base class
whose subclasses register on definition); the package's __init__ imports every module beside it,
so nothing else lists the names. An unknown name is the same one line for every kind
(`router.name='fastest': must be one of least_outstanding_requests, ..., round_robin`).
Plain Python, no torch.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Callable, Generic, TypeVar

from chunklab.config import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> implementations for one config key."""

    def __init__(self, key: str):
        self.key = key  # the config key whose values are this registry's names (for the error line)
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items and self._items[name] is not item:
            raise ValueError(f"{self.key}: {name!r} is registered twice ({self._items[name]!r} and {item!r})")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator: `@COST_MODELS.register("roofline")` over the factory or class."""
        return lambda item: self.add(name, item)

    def get(self, name: str, key: str | None = None) -> T:
        """The implementation called `name`; else ConfigError naming the key, the value and the valid names.
        key: the config key to name when it is not this registry's own (router.decode reads ROUTERS)."""
        if name not in self._items:
            raise ConfigError(f"{key or self.key}={name!r}: must be one of {', '.join(self.names())}")
        return self._items[name]

    def check(self, name: str, key: str | None = None) -> None:
        self.get(name, key)

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


def import_package_modules(package: str, path: list[str]) -> None:
    """Imports every module of a variant package, so each registers itself: called from the package's
    __init__ as `import_package_modules(__name__, __path__)`; the stages' derived DVC deps read this
    call and count every module beside it (chunklab.stages.deps)."""
    for module in pkgutil.iter_modules(path):
        importlib.import_module(f"{package}.{module.name}")
