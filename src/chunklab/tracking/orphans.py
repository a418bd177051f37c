"""Runs left RUNNING by a process that died without ending them (SIGKILL, the OOM killer).

A run cannot mark itself when it is killed with SIGKILL. Every run records the host, pid
and process start time that own it; the next run against the same store ends the RUNNING
runs of this host whose process is gone (or whose pid now belongs to another process) as
KILLED, with one line on stderr each. Runs of other hosts (a cluster's nodes) are left
alone: this host cannot see their processes.
"""
from __future__ import annotations

import os
import socket
import sys

import psutil

HOST_TAG, PID_TAG, STARTED_TAG = "chunklab.host", "chunklab.pid", "chunklab.pid_started"


def _started(pid: int) -> str:
    return f"{psutil.Process(pid).create_time():.2f}"


def process_tags() -> dict[str, str]:
    """Who owns a run: set when it starts."""
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid()), STARTED_TAG: _started(os.getpid())}


def owner_alive(pid: int, started: str) -> bool:
    try:
        return _started(pid) == started
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def end_orphaned_runs() -> list[str]:
    """Ends this host's orphaned RUNNING runs in the current store as KILLED; returns their ids."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    host = socket.gethostname()
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    found = client.search_runs(experiments, filter_string=f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host}'",
                               max_results=1000)
    ended = []
    for run in found:
        tags = run.data.tags
        pid = int(tags.get(PID_TAG, "0") or 0)
        if pid and owner_alive(pid, tags.get(STARTED_TAG, "")):
            continue
        client.set_tag(run.info.run_id, "chunklab.ended_by", f"a later run: its process {pid} on {host} was gone")
        client.set_terminated(run.info.run_id, "KILLED")
        name = tags.get("mlflow.runName", "")
        print(f"chunklab: MLflow run {name!r} ({run.info.run_id}) was left RUNNING by process {pid}, which no longer "
              f"exists (killed?): marked KILLED", file=sys.stderr)
        ended.append(run.info.run_id)
    return ended
