"""A grid of runs through the same path as run.py, collected into tables."""
from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from chunklab.app import run_tracked
from chunklab.engine.step_log import FEATURE_PREFIX
from chunklab.experiments.compose import compose_run_config
from chunklab.metrics.conditions import conditions_line


@dataclass
class SweepResult:
    runs: pd.DataFrame  # one row per run: the grid keys, then every summary metric
    requests: pd.DataFrame  # one row per request per run
    tokens: pd.DataFrame  # every token's emission time, for runs asked to keep them
    steps: pd.DataFrame  # every step (duration, prediction, shape) of every run, when asked
    conditions: list[str] = field(default_factory=list)


STEP_COLUMNS = ["duration_s", "predicted_s", "num_decode_tokens", "num_prefill_tokens", "num_prefill_chunks"]


def grid(axes: dict[str, list]) -> list[dict]:
    keys = list(axes)
    return [dict(zip(keys, values)) for values in itertools.product(*(axes[k] for k in keys))]


def run_grid(name: str, base: list[str], points: list[dict], run_root: Path,
             keep_tokens=lambda point: False, keep_steps: bool = False, before_each=None) -> SweepResult:
    """before_each(i): called just before run i; the dict it returns joins that run's row (the
    fidelity stage reads a speed sentinel there)."""
    rows, requests, tokens, conds, steps = [], [], [], [], []
    started_s = time.monotonic()
    for i, point in enumerate(points):
        overrides = base + [f"{k}={v}" for k, v in point.items()]
        cfg = compose_run_config(overrides)
        key = {k.split(".")[-1]: v for k, v in point.items()}
        before = before_each(i) if before_each else {}
        out = run_tracked(cfg, run_root / f"{name}-{i}", {"sweep": name, "overrides": " ".join(overrides)},
                          " ".join(f"{k}={v}" for k, v in key.items()))
        rows.append(key | {"rate_per_s": cfg.workload.rate_per_s} | before | out.summary)
        requests.append(pd.DataFrame([{"run": i} | key | _request_row(r) for r in out.records]))
        if keep_tokens(point):
            tokens.append(pd.DataFrame([key | {"request_id": s.seq_id, "label": s.request.label,
                                               "arrival_s": s.request.arrival_s, "token_index": j, "time_s": t}
                                        for s in out.result.sequences for j, t in enumerate(s.token_times_s)]))
        if keep_steps:
            frame = out.result.steps.to_frame()
            features = [c for c in frame.columns if c.startswith(FEATURE_PREFIX)]  # a measured run's shapes
            steps.append(frame[STEP_COLUMNS + features].assign(run=i))
        conds.append(conditions_line(out.conditions))
        print(f"[{name}] run {i + 1}/{len(points)}, {time.monotonic() - started_s:.0f} s: {point}: TTFT p50 "
              f"{out.summary.get('ttft_p50_s', float('nan')):.3f}s, {out.summary['output_tokens_per_s']:.1f} tok/s",
              file=sys.stderr, flush=True)
    return SweepResult(pd.DataFrame(rows), pd.concat(requests, ignore_index=True),
                       pd.concat(tokens, ignore_index=True) if tokens else pd.DataFrame(),
                       pd.concat(steps, ignore_index=True) if steps else pd.DataFrame(), conds)


def _request_row(r) -> dict:
    return {"request_id": r.request_id, "label": r.label, "status": r.status, "arrival_s": r.arrival_s,
            "prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens, "ttft_s": r.ttft_s,
            "tpot_s": r.tpot_s, "e2e_s": r.e2e_s, "queue_s": r.queue_s, "max_gap_s": r.max_gap_s,
            "max_clean_gap_s": r.max_clean_gap_s, "num_noisy_gaps": r.num_noisy_gaps, "itl_p99_s": r.itl_p99_s, "preemptions": r.preemptions,
            "output_digest": r.output_digest, "gaps_s": " ".join(f"{g:.6f}" for g in r.gaps_s)}
