"""Workloads: timed requests from a config. Plain Python, no torch."""
from __future__ import annotations

from chunklab.config import RunConfig
from chunklab.engine.sequence import Request
from chunklab.workload.azure_trace import TraceStats, trace_requests
from chunklab.workload.synthetic import synthetic_requests


def make_requests(cfg: RunConfig) -> tuple[list[Request], TraceStats | None]:
    if cfg.workload.kind == "trace":
        return trace_requests(cfg.workload, cfg.model.max_seq_len, cfg.model.vocab_size)
    return synthetic_requests(cfg.workload, cfg.model.vocab_size), None
