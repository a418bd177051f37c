"""MLflow logging. Nothing else in chunklab imports mlflow."""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path

from chunklab.config import TrackingConfig
from chunklab.interrupts import Interrupted
from chunklab.tracking.orphans import end_orphaned_runs, process_tags

MAX_BATCH = 1000  # MLflow's limit of metrics per log_batch call
STEP_SERIES = ("duration_s", "num_decode_tokens", "num_prefill_tokens", "num_running", "num_waiting", "num_free_blocks")
MAX_STEP_POINTS = 150  # per series: a chart of the run in `mlflow ui` (every step is in the steps.csv artifact).
# Each point stands for a bucket of consecutive steps: duration_s its slowest (a stall shows however
# long the run), the other series the bucket's first step. Logging costs ~0.2 ms a point into sqlite:
# 500 points of 6 series took 0.6 s of a 7 s measured run of 100 requests, 150 take 0.2 s


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

    quiet_mlflow()
    mlflow.set_tracking_uri(tracking_uri(cfg))
    mlflow.set_experiment(cfg.experiment_name)


def quiet_mlflow() -> None:
    """MLflow's INFO lines (creating tables, creating the experiment, starting the sampler) are
    not the user's business; its warnings still show."""
    logging.getLogger("mlflow").setLevel(logging.WARNING)


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
        end_orphaned_runs()  # runs of this host that a SIGKILL left RUNNING
        run = mlflow.start_run(run_name=self.cfg.run_name or name or None, tags=tags | process_tags(),
                               log_system_metrics=False)
        self.run_id = run.info.run_id
        sampler = None
        if self.cfg.system_metrics_interval_s > 0:
            from chunklab.tracking.system_metrics import SystemMetrics  # optional: mlflow's monitor, when sampling

            sampler = SystemMetrics(self.run_id, self.cfg.system_metrics_interval_s)
            sampler.start()
        status = "FINISHED"
        try:
            mlflow.log_params(params)
            yield self
        except (Interrupted, KeyboardInterrupt):
            status = "KILLED"
            raise
        except BaseException:
            status = "FAILED"
            raise
        finally:
            if sampler is not None:
                sampler.finish()
            mlflow.end_run(status)

    def log_workload(self, name: str, requests, trace_path: str, spec: dict[str, str]) -> None:
        """The workload as an MLflow dataset input: the trace file (with its digest) or the synthetic spec."""
        if not self.cfg.enabled:
            return
        import mlflow

        from chunklab.tracking.workload_dataset import workload_dataset  # optional: mlflow.data, when tracking

        dataset = workload_dataset(requests, name, trace_path, spec)
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

        mlflow.set_tags({f"conditions.{k}": v for k, v in conditions.items()} | tags)
        mlflow.log_metrics({k: float(v) for k, v in summary.items()})
        now_ms = int(time.time() * 1000)
        series = step_series(steps, now_ms)
        client = mlflow.tracking.MlflowClient()
        for start in range(0, len(series), MAX_BATCH):
            client.log_batch(self.run_id, metrics=series[start:start + MAX_BATCH])
        for path in files:
            mlflow.log_artifact(str(path))

    def log_best(self, goodput: float, path: Path) -> None:
        import mlflow

        mlflow.log_metric("best_goodput_req_per_s", goodput)
        mlflow.log_artifact(str(path))


def step_series(steps, timestamp_ms: int) -> list:
    """The STEP_SERIES as MLflow metrics, at most MAX_STEP_POINTS each, stepped by the index of each
    bucket's first step: duration_s the bucket's slowest step, the others its first."""
    from mlflow.entities import Metric

    stride = max(1, -(-len(steps) // MAX_STEP_POINTS))
    out = []
    for i in range(0, len(steps), stride):
        for name in STEP_SERIES:
            column = steps.columns[name]
            value = max(column[i:i + stride]) if name == "duration_s" else column[i]
            out.append(Metric(f"step.{name}", float(value), timestamp_ms, i))
    return out
