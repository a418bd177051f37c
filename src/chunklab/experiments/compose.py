"""Compose the real conf/ with overrides, outside a Hydra app (DVC stages, benchmarks, tests)."""
from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from chunklab.config import PROJECT_ROOT, ConfigError, RunConfig
from chunklab.schema import error_line, register, to_run_config

CONF_DIR = PROJECT_ROOT / "conf"


def compose_run_config(overrides: list[str]) -> RunConfig:
    register()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(error_line(err)) from None
    return to_run_config(cfg)
