"""MLflow's system-metrics sampler, plus one sample when the run ends.

MLflow's own monitor publishes a sample only after a full sampling interval, so a run
shorter than the interval (a short run, a fast machine) records no system metrics at all.
Here finish() takes one last sample and publishes what was collected since the last
publication: every run with sampling on has system/* metrics, whatever its length.
"""
from __future__ import annotations

import logging

from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor


class SystemMetrics(SystemMetricsMonitor):
    def __init__(self, run_id: str, interval_s: float):
        super().__init__(run_id, sampling_interval=interval_s)

    def finish(self) -> None:
        if self._process is None:
            return
        self._shutdown_event.set()
        self._process.join()
        self._process = None
        try:  # never in the way of ending the run with its status
            self.collect_metrics()  # the sampler's loop may have stopped before publishing anything
            self.publish_metrics(self.aggregate_metrics())
            self.mlflow_logger.flush()
        except Exception as err:  # noqa: BLE001 - MLflow's own finish() logs and goes on likewise
            logging.getLogger(__name__).warning("system metrics: the last sample was not logged (%s)", err)
