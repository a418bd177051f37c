"""MLflow logging. Nothing else in chunklab imports mlflow."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

from chunklab.config import TrackingConfig
from chunklab.config import PROJECT_ROOT

MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
STEP_SERIES = ("duration_s", "num_decode_tokens", "num_prefill_tokens", "num_running", "num_waiting", "num_free_blocks")


def tracking_uri(cfg: TrackingConfig) -> str:
    """Config, else MLFLOW_TRACKING_URI, else MLflow's default file (mlflow.db) in the project root."""
    return cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{PROJECT_ROOT / 'mlflow.db'}"


def flatten(data: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = str(value)
    return out


class Tracker:
    def __init__(self, cfg: TrackingConfig):
        self.cfg = cfg
        self.run_id: str | None = None

    @contextmanager
    def run(self, params: dict[str, str], tags: dict[str, str]):
        """An MLflow run that ends FINISHED, FAILED on an error, KILLED on Ctrl-C."""
        if not self.cfg.enabled:
            yield self
            return
        import mlflow

        mlflow.set_tracking_uri(tracking_uri(self.cfg))
        mlflow.set_experiment(self.cfg.experiment_name)
        run = mlflow.start_run(run_name=self.cfg.run_name or None, tags=tags)
        self.run_id = run.info.run_id
        try:
            mlflow.log_params(params)
            yield self
        except KeyboardInterrupt:
            mlflow.end_run("KILLED")
            raise
        except BaseException:
            mlflow.end_run("FAILED")
            raise
        mlflow.end_run("FINISHED")

    def log_result(self, summary: dict[str, float], conditions: dict[str, str], tags: dict[str, str], steps,
                   files: list[Path]) -> None:
        if not self.cfg.enabled:
            return
        import mlflow
        from mlflow.entities import Metric

        mlflow.set_tags({f"conditions.{k}": v for k, v in conditions.items()} | tags)
        mlflow.log_metrics({k: float(v) for k, v in summary.items()})
        now_ms = int(time.time() * 1000)
        series = [Metric(f"step.{name}", float(getattr(s, name)), now_ms, i)
                  for i, s in enumerate(steps) for name in STEP_SERIES]
        client = mlflow.tracking.MlflowClient()
        for start in range(0, len(series), MAX_BATCH):
            client.log_batch(self.run_id, metrics=series[start:start + MAX_BATCH])
        for path in files:
            mlflow.log_artifact(str(path))

    def log_best(self, goodput: float, path: Path) -> None:
        import mlflow

        mlflow.log_metric("best_goodput_req_per_s", goodput)
        mlflow.log_artifact(str(path))
