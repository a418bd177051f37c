"""The run's dataclasses (chunklab.config) registered as Hydra's structured config schema.

conf/config.yaml puts the schema first in its defaults list, so Hydra itself rejects a
wrong type or an unknown key while composing, and the composed config converts straight
into a RunConfig. Hydra's multi-line errors become one line here; cross-field checks stay
in config.validate.
"""
from __future__ import annotations

import dataclasses
import re

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from chunklab.config import ConfigError, RunConfig, validate
from chunklab.paths import in_project

SCHEMA_NAME = "chunklab_schema"


def _writable(node):
    # The dataclasses are frozen (a run's config never changes), which OmegaConf turns into
    # read-only nodes; composition must merge the group files into them first.
    OmegaConf.set_readonly(node, False)
    if isinstance(node, DictConfig):
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, (DictConfig, ListConfig)):
                _writable(child)
    return node


def register() -> None:
    ConfigStore.instance().store(name=SCHEMA_NAME, node=_writable(OmegaConf.structured(RunConfig)))
    # `rate_per_s: ${unless_load:8.0,${.load}}` in a workload file: the default rate, or null once
    # workload.load is set, so `workload.load=0.8` alone works and setting both is an error.
    OmegaConf.register_new_resolver("unless_load", lambda rate, load: rate if load is None else None, replace=True)


def to_run_config(cfg: DictConfig) -> RunConfig:
    """The composed config as the typed, validated RunConfig (experiments/prepare.py then makes it
    concrete for this machine)."""
    unknown = _unknown_keys(cfg)
    if unknown:  # `+key=value` forces a key past the schema
        raise ConfigError(f"{unknown[0]}: unknown key: not in the schema ({SCHEMA_NAME})")
    try:
        run_cfg = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as err:
        raise ConfigError(error_line(err)) from None
    run_cfg = with_project_paths(run_cfg)
    validate(run_cfg)
    return run_cfg


def with_project_paths(cfg: RunConfig) -> RunConfig:
    """A relative workload.trace.path is taken from the project directory (chunklab.paths), like
    engine.profile, whatever folder the command or a Hydra job runs in."""
    trace = cfg.workload.trace
    if not trace.path:
        return cfg
    trace = dataclasses.replace(trace, path=str(in_project(trace.path)))
    return dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, trace=trace))


def _unknown_keys(node: DictConfig, prefix: str = "") -> list[str]:
    schema = OmegaConf.get_type(node)
    fields = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    out = []
    for key in node.keys():
        if fields is not None and key not in fields:
            out.append(f"{prefix}{key}")
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            out += _unknown_keys(child, f"{prefix}{key}.")
    return out


# Config-group options renamed so that each concept has one name: the old spelling is one line naming the new.
RENAMED_OPTIONS = {("router", "least_outstanding"): "least_outstanding_requests",
                   ("router", "least_tokens"): "least_outstanding_tokens"}


def error_line(err: BaseException) -> str:
    """One line naming the key (and the override, where there is one) for a Hydra/OmegaConf error."""
    missing = re.search(r"Could not find '(\w+)/(\w+)'", str(err))
    if missing and tuple(missing.groups()) in RENAMED_OPTIONS:
        group, old = missing.groups()
        return f"{group}={old} was renamed: use {group}={RENAMED_OPTIONS[(group, old)]}"
    cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else err
    override = re.search(r"override '?([^\s']+=[^\s']*)", str(err))
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        unknown = " unknown key:" if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) else ""
        where = override.group(1) if override and not unknown else cause.full_key
        return f"{where}:{unknown} {_first_line(cause.msg)}"
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip())


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text and text.strip() else ""
