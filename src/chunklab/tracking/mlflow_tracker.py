"""MLflow logging. Nothing else in chunklab imports mlflow."""
from __future__ import annotations

import hashlib
import logging
import os
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from chunklab.config import TrackingConfig
from chunklab.interrupts import Interrupted

MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
STEP_SERIES = ("duration_s", "num_decode_tokens", "num_prefill_tokens", "num_running", "num_waiting", "num_free_blocks")
MAX_STEP_POINTS = 2000  # per series: a long simulated run has ~10^5 steps; every one is in steps.csv


def tracking_uri(cfg: TrackingConfig) -> str:
    """Config, else MLFLOW_TRACKING_URI, else MLflow's own default: mlflow.db in the current
    directory (where `mlflow ui` is then started), never inside the installed package."""
    return cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def is_file_store(uri: str) -> bool:
    return not uri.startswith(("http://", "https://", "databricks"))


def flatten(data: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out |= flatten(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = str(value)
    return out


def ensure_experiment(cfg: TrackingConfig) -> None:
    """Creates the store and the experiment now, so parallel jobs never race to create them."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(cfg))
    mlflow.set_experiment(cfg.experiment_name)


class Tracker:
    def __init__(self, cfg: TrackingConfig):
        self.cfg = cfg
        self.run_id: str | None = None

    @contextmanager
    def run(self, params: dict[str, str], tags: dict[str, str], name: str = ""):
        """An MLflow run that ends FINISHED, FAILED on an error, KILLED on a signal (Interrupted) or Ctrl-C.

        Named tracking.run_name, else `name`; system metrics (CPU, memory) are sampled while it runs."""
        if not self.cfg.enabled:
            yield self
            return
        import mlflow

        ensure_experiment(self.cfg)
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)  # no start/stop chatter per run
        if self.cfg.system_metrics_interval_s > 0:
            mlflow.set_system_metrics_sampling_interval(self.cfg.system_metrics_interval_s)
        run = mlflow.start_run(run_name=self.cfg.run_name or name or None, tags=tags,
                               log_system_metrics=self.cfg.system_metrics_interval_s > 0)
        self.run_id = run.info.run_id
        try:
            mlflow.log_params(params)
            yield self
        except (Interrupted, KeyboardInterrupt):
            mlflow.end_run("KILLED")
            raise
        except BaseException:
            mlflow.end_run("FAILED")
            raise
        mlflow.end_run("FINISHED")

    def log_workload(self, name: str, requests, trace_path: str, spec: dict[str, str]) -> None:
        """The workload as an MLflow dataset input: the trace file (with its digest) or the synthetic spec."""
        if not self.cfg.enabled:
            return
        import mlflow
        from mlflow.data.code_dataset_source import CodeDatasetSource

        with warnings.catch_warnings():  # its schema hint is about model inputs, not a workload table
            warnings.simplefilter("ignore", UserWarning)
            if trace_path:
                digest = hashlib.sha256(Path(trace_path).read_bytes()).hexdigest()[:16]
                dataset = mlflow.data.from_pandas(requests, source=trace_path, name=name, digest=digest)
            else:
                dataset = mlflow.data.from_pandas(requests, source=CodeDatasetSource(tags=spec), name=name)
        for attempt in range(5):
            try:
                mlflow.log_input(dataset, context="workload")
                return
            except mlflow.exceptions.MlflowException:
                # Parallel jobs logging the same dataset into one sqlite store can collide on its
                # unique key; the next attempt finds the row the other job wrote.
                if attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def log_result(self, summary: dict[str, float], conditions: dict[str, str], tags: dict[str, str], steps,
                   files: list[Path]) -> None:
        if not self.cfg.enabled:
            return
        import mlflow
        from mlflow.entities import Metric

        mlflow.set_tags({f"conditions.{k}": v for k, v in conditions.items()} | tags)
        mlflow.log_metrics({k: float(v) for k, v in summary.items()})
        now_ms = int(time.time() * 1000)
        stride = max(1, -(-len(steps) // MAX_STEP_POINTS))
        series = [Metric(f"step.{name}", float(steps.columns[name][i]), now_ms, i)
                  for i in range(0, len(steps), stride) for name in STEP_SERIES]
        client = mlflow.tracking.MlflowClient()
        for start in range(0, len(series), MAX_BATCH):
            client.log_batch(self.run_id, metrics=series[start:start + MAX_BATCH])
        for path in files:
            mlflow.log_artifact(str(path))

    def log_best(self, goodput: float, path: Path) -> None:
        import mlflow

        mlflow.log_metric("best_goodput_req_per_s", goodput)
        mlflow.log_artifact(str(path))
