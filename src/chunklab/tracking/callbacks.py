"""Hydra callback: after an Optuna sweep, keep the best trial as a file and an MLflow run."""
from __future__ import annotations

from pathlib import Path

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from chunklab.config import TrackingConfig, build
from chunklab.tracking.mlflow_tracker import Tracker


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
        tracking = build(TrackingConfig, OmegaConf.to_container(config.tracking, resolve=True), "tracking.")
        if not tracking.enabled:
            return
        tracker = Tracker(tracking)
        params = {k: str(v) for k, v in found["best_params"].items()} | {"workload.name": config.workload.name}
        with tracker.run(params, {"best_of_sweep": str(sweep_dir), "mlflow.runName": f"best of {sweep_dir.name}"}):
            tracker.log_best(best["best_goodput_req_per_s"], path)
