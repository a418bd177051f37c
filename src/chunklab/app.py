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

from chunklab.config import RunConfig
from chunklab.engine.clock import make_clock
from chunklab.engine.engine import LLMEngine
from chunklab.engine.model_runner import ModelRunner
from chunklab.engine.serve import ServeResult, serve
from chunklab.metrics.conditions import conditions, conditions_line
from chunklab.metrics.isolation import IsolatedLatency, with_slowdown
from chunklab.metrics.records import RequestRecord, record
from chunklab.metrics.summary import summarize
from chunklab.plots import latency_figure
from chunklab.tracking.mlflow_tracker import Tracker, flatten
from chunklab.workload import make_requests

REQUEST_COLUMNS = ("request_id", "label", "status", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s",
                   "tpot_s", "e2e_s", "queue_s", "max_gap_s", "itl_p99_s", "slowdown", "preemptions",
                   "output_digest", "reject_reason")


@dataclass
class RunOutput:
    summary: dict[str, float]
    conditions: dict[str, str]
    records: list[RequestRecord]
    result: ServeResult
    files: list[Path]


def run_experiment(cfg: RunConfig, run_dir: Path) -> RunOutput:
    requests, trace_stats = make_requests(cfg)
    runner = ModelRunner(cfg.model, cfg.engine)
    engine = LLMEngine(cfg.model, cfg.engine, cfg.scheduler, make_clock(cfg.engine.clock), runner)
    engine.warmup()
    with tqdm(total=len(requests), desc="requests", unit="req", disable=not cfg.tracking.progress or None,
              leave=False) as bar:
        result = serve(engine, requests, on_done=bar.update)
    records = [record(s) for s in result.sequences]
    if cfg.slowdown:
        records = with_slowdown(records, IsolatedLatency.measure(engine, requests))
    summary = summarize(records, result.steps, result.makespan_s, cfg.slo, engine.scheduler.num_chunked_prefills)
    summary["kv_cache_mb"] = runner.kv_cache_bytes / 2**20
    if trace_stats is not None:
        summary |= {"trace_rows": trace_stats.num_rows, "trace_clipped": trace_stats.num_clipped,
                    "trace_overlong": trace_stats.num_overlong}
    cond = conditions(cfg, runner.model.num_parameters())
    files = write_files(run_dir, cfg, summary, cond, records, result)
    return RunOutput(summary, cond, records, result, files)


def write_files(run_dir: Path, cfg: RunConfig, summary, cond, records, result: ServeResult) -> list[Path]:
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = [run_dir / "summary.json", run_dir / "requests.csv", run_dir / "steps.csv", run_dir / "latency.png"]
    doc = {"summary": summary, "conditions": cond, "conditions_line": conditions_line(cond),
           "config": dataclasses.asdict(cfg)}
    paths[0].write_text(json.dumps(doc, indent=2, default=str))
    rows = [{k: getattr(r, k) for k in REQUEST_COLUMNS} for r in records]
    pd.DataFrame(rows, columns=REQUEST_COLUMNS).to_csv(paths[1], index=False)
    steps = pd.DataFrame([dataclasses.asdict(s) for s in result.steps])
    steps.to_csv(paths[2], index_label="step")
    latency_figure(records, f"{cfg.workload.name}, budget {cfg.scheduler.budget}", paths[3])
    return paths


def run_tracked(cfg: RunConfig, run_dir: Path, tags: dict[str, str]) -> RunOutput:
    tracker = Tracker(cfg.tracking)
    with tracker.run(flatten(dataclasses.asdict(cfg)), tags):
        out = run_experiment(cfg, run_dir)
        tracker.log_result(out.summary, out.conditions, out.result.steps, out.files)
    return out
