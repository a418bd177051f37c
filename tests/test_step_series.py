"""The step series a run logs to MLflow (tracking/mlflow_tracker.step_series): at most MAX_STEP_POINTS a
series however long the run, and a stall shows in duration_s wherever it falls."""
from chunklab.engine.engine import StepRecord
from chunklab.engine.step_log import StepLog
from chunklab.tracking.mlflow_tracker import MAX_STEP_POINTS, STEP_SERIES, step_series


def test_a_long_run_keeps_its_slowest_step_in_a_bounded_series():
    n = 10 * MAX_STEP_POINTS + 7
    stall_at = 5 * MAX_STEP_POINTS + 3  # not the first step of its bucket
    steps = StepLog.of(StepRecord(0.001 * i, 0.5 if i == stall_at else 0.001, i % 8, 0, 0, i, 0, 100, 0)
                       for i in range(n))
    series = step_series(steps, 0)
    by_name = {name: [m for m in series if m.key == f"step.{name}"] for name in STEP_SERIES}
    assert all(0 < len(points) <= MAX_STEP_POINTS for points in by_name.values())
    assert max(m.value for m in by_name["duration_s"]) == 0.5
    assert all(m.value == m.step for m in by_name["num_running"])  # the other series: each bucket's first step
