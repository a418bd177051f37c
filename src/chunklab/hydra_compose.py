"""The project's conf/ composed with overrides outside a Hydra app, into a validated RunConfig.

Nothing else: no registry checks, no KV pool sizing, no load (experiments/compose.py adds those,
as run.py does). A stage that needs only the model and the engine's compute path (calibrate,
prefill_split) composes here, so its DVC deps stop at the config.
"""
from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from chunklab.config import ConfigError, RunConfig
from chunklab.paths import MARKER, project_dir
from chunklab.schema import error_line, register, to_run_config


def compose_config(overrides: list[str]) -> RunConfig:
    root = project_dir()
    if not (root / MARKER).is_file():
        raise ConfigError(f"no {MARKER} in {root} or above: run from a chunklab checkout (or set CHUNKLAB_PROJECT_DIR)")
    register()
    try:
        with initialize_config_dir(config_dir=str(root / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(error_line(err)) from None
    return to_run_config(cfg)
