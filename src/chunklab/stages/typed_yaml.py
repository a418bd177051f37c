"""params.yaml read one typed way: each stage module declares the dataclass of its section(s) and
loads it with `load_section(path, "sim_maps", SimMapsParams)`.

A key the dataclass does not name, a missing key without a default, or a value of the wrong type is
a ParamsError whose message is one line naming the file and the key
(`params.yaml: sim_maps.loads[2]: expected float, got 'x'`).
Values are never reshaped: an int given for a float becomes that float, nothing else is coerced.
Defaults exist only where a stage has always treated the key as optional (`no_overrides()`).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Union

import yaml

# A params section's dataclass: frozen (a stage never edits its params) and keyword-only, so a field
# with a default may sit anywhere, in params.yaml's order.
Section = dataclasses.dataclass(frozen=True, kw_only=True)


class ParamsError(ValueError):
    """A params.yaml that does not match its dataclasses; the message is one line."""


def no_overrides() -> list[str]:
    """The default of an optional `overrides`-like key: no Hydra overrides."""
    return dataclasses.field(default_factory=list)


def load_section(path: str | Path, name: str, cls):
    """params.yaml's section `name` at path, checked whole against the dataclass cls and built."""
    return _load(path, name, cls, whole=True)


def load_view(path: str | Path, name: str, cls):
    """Only the keys of section `name` that the dataclass cls names, typed; the section's other keys
    are left to the stage that owns it (its load_section checks them). For a reader of a few keys of
    another stage's section (the plots stage's captions)."""
    return _load(path, name, cls, whole=False)


def _load(path: str | Path, name: str, cls, whole: bool):
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ParamsError(f"{path}: unreadable: {' '.join(str(exc).split())}") from None
    try:
        if not isinstance(doc, dict):
            raise ParamsError(f"the file: expected a mapping of sections, got {doc!r}")
        if name not in doc:
            raise ParamsError(f"{name}: missing")
        value = doc[name]
        if not whole and isinstance(value, dict):
            names = {f.name for f in dataclasses.fields(cls)}
            value = {k: v for k, v in value.items() if k in names}
        return typed(cls, value, name)
    except ParamsError as exc:
        raise ParamsError(f"{path}: {exc}") from None


def typed(tp, value, where: str):
    """value checked against the type tp (dataclass, list, tuple, dict, union, scalar) and built."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _section(tp, value, where)
    if origin in (Union, types.UnionType):
        for option in args:
            try:
                return typed(option, value, where)
            except ParamsError:
                pass
    elif origin is list and isinstance(value, list):
        return [typed(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    elif origin is tuple and isinstance(value, list) and len(value) == len(args):
        return tuple(typed(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    elif origin is dict and isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: typed(args[1], v, f"{where}.{k}") for k, v in value.items()}
    elif tp is type(None) and value is None:
        return None
    elif tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif tp in (int, str, bool) and type(value) is tp:
        return value
    raise ParamsError(f"{where}: expected {_name(tp)}, got {value!r}")


def _section(cls, value, where: str):
    if not isinstance(value, dict):
        raise ParamsError(f"{where or 'the file'}: expected a mapping of {cls.__name__}, got {value!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    prefix = f"{where}." if where else ""
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise ParamsError(f"{prefix}{unknown[0]}: unknown key (known: {', '.join(fields)})")
    missing = [name for name, f in fields.items() if name not in value
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ParamsError(f"{prefix}{missing[0]}: missing")
    return cls(**{k: typed(hints[k], v, f"{prefix}{k}") for k, v in value.items()})


def _name(tp) -> str:
    if dataclasses.is_dataclass(tp):
        return f"a mapping of {tp.__name__}"
    if tp is type(None):
        return "null"
    return str(tp) if typing.get_args(tp) else tp.__name__
