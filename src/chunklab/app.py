"""One experiment: workload -> engine -> records -> summary -> files (-> MLflow).

Called by run.py after it has built and validated the RunConfig; also by the
DVC stages, so the pipeline and the CLI measure through the same code.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from chunklab.topology.phases import PHASES, phase_seconds
from chunklab.config import ModelConfig, RunConfig, WorkloadConfig
from chunklab.engine.replay import ReplayResult
from chunklab.engine.executors.simulated import NOTE as SIMULATED_NOTE
from chunklab.interrupts import Interrupted, Interrupts
from chunklab.metrics.conditions import conditions, conditions_line, describe_workload
from chunklab.metrics.records import RequestRecord
from chunklab.metrics.stalls import stall_summary, with_clean_gaps
from chunklab.metrics.summary import noise_guard
from chunklab.model.sizes import kv_cache_bytes, num_parameters
from chunklab.plots import latency_figure
from chunklab.runner import execute
from chunklab.tracking.mlflow_tracker import Tracker, flatten

REQUEST_COLUMNS = ("request_id", "label", "status", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s",
                   "tpot_s", "e2e_s", "queue_s", "max_gap_s", "max_clean_gap_s", "num_noisy_gaps", "itl_p99_s",
                   "slowdown", "preemptions", "output_digest", "reason")
CLUSTER_COLUMNS = ("prefill_instance", "decode_instance", *PHASES)  # topology other than single


class RunFailed(Exception):
    """A step raised; the run's partial results were written first (`output`)."""

    def __init__(self, output: "RunOutput"):
        super().__init__(f"run failed after writing partial results: {output.result.error!r}")
        self.output = output


@dataclass
class RunOutput:
    summary: dict[str, float]
    conditions: dict[str, str]
    records: list[RequestRecord]
    result: ReplayResult
    files: list[Path]
    tags: dict[str, str]  # executor and profile: which kind of numbers these are


def run_experiment(cfg: RunConfig, run_dir: Path, should_stop=None) -> RunOutput:
    """should_stop() is polled between steps; a stopped run still writes what it measured."""
    simulated = cfg.engine.executor == "simulated"
    with tqdm(desc="requests", unit="req", disable=not cfg.tracking.progress or None, leave=False) as bar:
        run = execute(cfg, slowdown=cfg.slowdown, on_requests=bar.reset, on_done=bar.update, should_stop=should_stop)
    engine, result, records, summary, trace_stats = run.engine, run.result, run.records, run.summary, run.trace_stats
    why_unguarded = run.why_unguarded
    summary["kv_cache_mb"] = kv_cache_bytes(cfg.model, cfg.engine) / 2**20
    if not simulated:
        summary |= noise_guard(result.steps)  # measured against predicted: the machine's stalls
        records = with_clean_gaps(records, result.sequences, result.steps)  # the gaps those stalls stretched
        summary |= stall_summary(records)
    if trace_stats is not None:
        summary |= {"trace_rows": trace_stats.num_rows, "trace_clipped": trace_stats.num_clipped,
                    "trace_overlong": trace_stats.num_overlong, "trace_reordered": trace_stats.num_reordered}
    cond = conditions(cfg, num_parameters(cfg.model), engine.cost_model, getattr(engine.executor, "forward_path", ""))
    tags = {"executor": cfg.engine.executor} | (engine.cost_model.provenance.tags if engine.cost_model else {})
    notes = {"executor": cfg.engine.executor,
             "note": SIMULATED_NOTE if simulated else "measured run: real forward passes, real time",
             "noise_guard": "" if simulated else (why_unguarded and f"off: {why_unguarded}") or "on"}
    placements = run.placements if cfg.topology.name != "single" else None
    files = write_files(run_dir, cfg, summary, cond, records, result, notes, placements)
    out = RunOutput(summary, cond, records, result, files, tags)
    if result.error is not None:
        raise RunFailed(out) from result.error
    return out


def write_files(run_dir: Path, cfg: RunConfig, summary, cond, records, result: ReplayResult,
                notes: dict[str, str], placements=None) -> list[Path]:
    """placements (a cluster's request_id -> Placement): requests.csv adds CLUSTER_COLUMNS."""
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = [run_dir / "summary.json", run_dir / "requests.csv", run_dir / "steps.csv", run_dir / "latency.png"]
    doc = notes | {"summary": summary, "conditions": cond, "conditions_line": conditions_line(cond),
                   "config": dataclasses.asdict(cfg)}
    paths[0].write_text(json.dumps(doc, indent=2, default=str))
    rows = [{k: getattr(r, k) for k in REQUEST_COLUMNS} for r in records]
    columns = REQUEST_COLUMNS
    if placements is not None:
        columns += CLUSTER_COLUMNS
        for row, seq in zip(rows, result.sequences):
            where = placements[seq.seq_id]
            row |= where.instances() | phase_seconds(seq, where)
    pd.DataFrame(rows, columns=columns).to_csv(paths[1], index=False)
    result.steps.write_csv(paths[2])
    kind = "simulated" if cfg.engine.executor == "simulated" else "measured"
    latency_figure(records, f"{cfg.workload.name}, budget {cfg.scheduler.budget} ({kind})", paths[3])
    return paths


def run_tracked(cfg: RunConfig, run_dir: Path, tags: dict[str, str], name: str = "") -> RunOutput:
    """run_experiment inside an MLflow run that ends FINISHED, FAILED, or KILLED on SIGINT/SIGTERM
    (then with the partial results logged, and Interrupted raised)."""
    tracker = Tracker(cfg.tracking)
    with Interrupts() as interrupts, tracker.run(flatten(dataclasses.asdict(cfg)), tags, name):
        try:
            out = run_experiment(cfg, run_dir, should_stop=lambda: interrupts.requested)
        except RunFailed as failed:  # log what it measured, then end FAILED with the step's error
            log_output(tracker, cfg.workload, cfg.model, failed.output)
            raise failed.output.result.error from None
        log_output(tracker, cfg.workload, cfg.model, out)
        if interrupts.requested:
            s = out.summary
            where = f"; MLflow run {tracker.run_id} marked KILLED" if tracker.run_id else ""
            raise Interrupted(interrupts.signum, (
                f"interrupted by {interrupts.name}: {s['num_finished']} of {s['num_requests']} requests finished, "
                f"{s['num_unfinished']} unfinished; partial results in {run_dir}{where}"))
    return out


def log_output(tracker: Tracker, workload: WorkloadConfig, model: ModelConfig, out: RunOutput) -> None:
    tracker.log_workload(workload.name, workload_frame(out.result.sequences),
                         workload.trace.path if workload.kind == "trace" else "",
                         {"spec": describe_workload(workload, model)})
    tracker.log_result(out.summary, out.conditions, out.tags, out.result.steps, out.files)


def workload_frame(sequences) -> pd.DataFrame:
    """The requests a run served, as the dataset MLflow records (ids, arrivals, lengths, class)."""
    return pd.DataFrame([(s.seq_id, s.request.arrival_s, s.num_prompt_tokens, s.request.max_output_tokens,
                          s.request.label) for s in sequences],
                        columns=["request_id", "arrival_s", "prompt_tokens", "max_output_tokens", "label"])
