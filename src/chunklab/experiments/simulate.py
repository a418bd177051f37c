"""Lean simulated runs for searches and maps: the real scheduler and serving loop on the
cost model, summaries only (no files, no MLflow), fanned out over processes.

Simulation is deterministic, so running in parallel changes nothing but the wall time.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import time
from typing import Callable, TypeVar

from chunklab.config import RunConfig, SloConfig
from chunklab.metrics.summary import meets_slo
from chunklab.runner import Executed, execute

T = TypeVar("T")
REQUEST_KEYS = ("request_id", "label", "status", "ttft_s", "tpot_s", "e2e_s")
View = Callable[[Executed], T]


def simulate(cfg: RunConfig, view: View | None = None) -> T:
    """cfg on its cost model (executor=simulated, no warm-up), the one simulated run path, seen through
    view: its summary by default, or another view of the run below (functools.partial binds a view's
    arguments, and keeps it a picklable task for simulate_many)."""
    run = execute(dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, executor="simulated")), warmup=False)
    if run.result.error is not None:  # a lean run keeps no files: a run that broke off is an error, not a result
        raise run.result.error
    return view(run) if view else run.summary


def regime_of(run: Executed) -> dict[str, float]:
    """The summary plus prefill_step_share: the share of steps carrying prefill tokens (near 1, a
    prefill is always in flight: the chapter's regime)."""
    prefill = run.result.steps.arrays()["num_prefill_tokens"]
    return run.summary | {"prefill_step_share": float((prefill > 0).mean()) if len(prefill) else 0.0}


def requests_of(run: Executed, keys: tuple[str, ...] = REQUEST_KEYS) -> tuple[dict[str, float], list[dict]]:
    """The summary and, per request, its RequestRecord fields `keys`: pairs with a measured run of the
    same workload, or with another scheduler's run of the same requests."""
    return run.summary, [{k: getattr(r, k) for k in keys} for r in run.records]


def judged_under(run: Executed, slos: dict[str, SloConfig]) -> dict[str, float]:
    """The summary plus, for each named SLO set, `goodput_req_per_s@<name>` and `slo_attainment@<name>`:
    one run judged against several SLOs (a run's decisions never depend on its SLO)."""
    summary, records = dict(run.summary), run.records
    makespan_s = summary["makespan_s"]
    for name, slo in slos.items():
        good = sum(meets_slo(r, slo) for r in records)
        summary[f"goodput_req_per_s@{name}"] = good / makespan_s if makespan_s else 0.0
        summary[f"slo_attainment@{name}"] = good / len(records) if records else 0.0
    return summary


def default_processes() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), int(os.environ.get("CHUNKLAB_SIM_PROCESSES", "64"))))


def simulate_many(items: list, processes: int | None = None, fn=simulate, label: str | None = None) -> list:
    """fn of each item, in order, in `processes` forked workers: by default a RunConfig simulated
    (simulate, or partial(simulate, view=requests_of), ...), or a stage's job tuple and its worker. With a label, a stage's
    long grid: `[label] run k/n (elapsed s)` on stderr at every tenth of it."""
    processes = processes or default_processes()
    start_s, every = time.monotonic(), max(1, len(items) // 10)

    def reported(results):
        out = []
        for k, result in enumerate(results, 1):
            out.append(result)
            if label and (k % every == 0 or k == len(items)):
                print(f"[{label}] run {k}/{len(items)} ({time.monotonic() - start_s:.0f} s)", file=sys.stderr, flush=True)
        return out

    if processes == 1 or len(items) == 1:
        return reported(fn(c) for c in items)
    with multiprocessing.get_context("fork").Pool(min(processes, len(items))) as pool:
        return reported(pool.imap(fn, items, chunksize=1))
