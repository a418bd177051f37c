"""Compose the real conf/ with overrides, outside a Hydra app (DVC stages, benchmarks)."""
from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from chunklab.config import RunConfig, build_run_config
from chunklab.config import PROJECT_ROOT

CONF_DIR = PROJECT_ROOT / "conf"


def compose_run_config(overrides: list[str]) -> RunConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return build_run_config(OmegaConf.to_container(cfg, resolve=True))
