"""Workloads: timed requests from a config. Plain Python, no torch."""
from __future__ import annotations

from chunklab.config import ModelConfig, WorkloadConfig
from chunklab.engine.sequence import Request
from chunklab.workload.azure_trace import TraceStats, trace_requests
from chunklab.workload.synthetic import synthetic_requests


def make_requests(workload: WorkloadConfig, model: ModelConfig) -> tuple[list[Request], TraceStats | None]:
    """The workload's requests for this model (its vocabulary; a trace's lengths fit to its context)."""
    if workload.kind == "trace":
        return trace_requests(workload, model.max_seq_len, model.vocab_size)
    return synthetic_requests(workload, model.vocab_size), None
