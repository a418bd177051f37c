"""Hydra callbacks: prepare a sweep before its jobs start; keep an Optuna sweep's best trial."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from chunklab.config import ConfigError, TrackingConfig
from chunklab.tracking.mlflow_tracker import Tracker, ensure_experiment, is_file_store, tracking_uri
from chunklab.tracking.naming import SWEEP_KEYS_ENV, sweep_keys

# Launchers whose jobs run side by side on this machine, and those that send each job elsewhere.
SAME_MACHINE_PARALLEL = ("JoblibLauncher", "LocalLauncher")
CLUSTER = ("SlurmLauncher",)


class PrepareSweep(Callback):
    """Before any job of a multirun starts: refuse launchers that would corrupt the results,
    create the MLflow store and experiment once (parallel jobs would race to create them),
    and tell the jobs which keys the sweep varies (they name their MLflow runs from them)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        launcher = str(config.hydra.launcher.get("_target_", "")).rsplit(".", 1)[-1]
        tracking = OmegaConf.to_object(config.tracking)
        try:
            extra = config.hydra.launcher.get("additional_parameters") or {}
            check_launcher(launcher, config.engine.executor, bool(config.allow_parallel_measurements), tracking,
                           exclusive=bool(extra.get("exclusive", False)))
        except ConfigError as err:
            # Hydra turns a callback's Exception into a warning and goes on; this must stop the sweep.
            print(f"chunklab: error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        params = config.hydra.sweeper.get("params") or {}
        os.environ[SWEEP_KEYS_ENV] = " ".join(sweep_keys(list(config.hydra.overrides.task), list(params)))
        if tracking.enabled:
            ensure_experiment(tracking)


def check_launcher(launcher: str, executor: str, allow_parallel: bool, tracking: TrackingConfig,
                   exclusive: bool = True) -> None:
    if launcher in SAME_MACHINE_PARALLEL and executor != "simulated" and not allow_parallel:
        raise ConfigError(
            f"hydra/launcher={launcher}: runs real-engine jobs side by side on this machine, where they slow "
            "each other and corrupt every timing; use the default (sequential) launcher, engine=simulated, a "
            "cluster launcher (hydra/launcher=slurm), or allow_parallel_measurements=true if you mean it")
    if launcher in CLUSTER and executor != "simulated" and not exclusive and not allow_parallel:
        raise ConfigError(
            f"hydra/launcher={launcher}: real-engine jobs without --exclusive can share a node and slow each "
            "other; use hydra/launcher=slurm (whole node per job), or allow_parallel_measurements=true")
    if launcher in CLUSTER and tracking.enabled and is_file_store(tracking_uri(tracking)):
        raise ConfigError(
            f"tracking.tracking_uri={tracking_uri(tracking)!r}: cluster jobs need an MLflow server all nodes "
            "can reach (a file store on a shared disk loses runs under concurrent writers); start one with "
            "`mlflow server --host 0.0.0.0` and pass tracking.tracking_uri=http://HOST:5000")


class LogBestTrial(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        results = sweep_dir / "optimization_results.yaml"
        if not results.is_file():
            return
        found = yaml.safe_load(results.read_text())
        best = {"best_params": found["best_params"], "best_goodput_req_per_s": float(found["best_value"]),
                "workload": config.workload.name, "num_requests": config.workload.num_requests,
                "seed": config.workload.seed, "sweep_dir": str(sweep_dir)}
        path = sweep_dir / "best_config.yaml"
        path.write_text(yaml.safe_dump(best, sort_keys=False))
        tracking = OmegaConf.to_object(config.tracking)
        if not tracking.enabled:
            return
        tracker = Tracker(tracking)
        params = {k: str(v) for k, v in found["best_params"].items()} | {"workload.name": config.workload.name}
        with tracker.run(params, {"best_of_sweep": str(sweep_dir)}, f"best of {sweep_dir.name}"):
            tracker.log_best(best["best_goodput_req_per_s"], path)
