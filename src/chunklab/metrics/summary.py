"""Run-level aggregates from request records and step records."""
from __future__ import annotations

import numpy as np

from chunklab.config import SloConfig
from chunklab.engine.step_log import StepLog
from chunklab.metrics.records import RequestRecord, percentile

PERCENTILES = (50, 90, 95, 99)
NOISY_STEP_FACTOR = 2.0  # a measured step this many times its prediction is the machine's, not the scheduler's


def meets_slo(r: RequestRecord, slo: SloConfig) -> bool:
    """Every configured target holds; a rejected request meets none."""
    if r.status != "finished":
        return False
    checks = [(slo.ttft_s, r.ttft_s), (slo.tpot_s, r.tpot_s), (slo.itl_p99_s, r.itl_p99_s)]
    # A one-token request has no gaps: its gap targets hold vacuously.
    return all(limit is None or value is None or value <= limit for limit, value in checks)


def meets_slo_table(requests, slo: SloConfig) -> np.ndarray:
    """meets_slo for every row of a table of records (pandas: status, ttft_s, tpot_s, itl_p99_s), as
    booleans: the same rule, for requests read back from a CSV (the report scores a run under other
    SLOs after it ran). A missing value (NaN) is a target that does not apply, as None above."""
    ok = (requests["status"] == "finished").to_numpy().copy()
    for limit, column in ((slo.ttft_s, "ttft_s"), (slo.tpot_s, "tpot_s"), (slo.itl_p99_s, "itl_p99_s")):
        if limit is not None:
            values = requests[column].to_numpy(dtype=float)
            ok &= np.isnan(values) | (values <= limit)
    return ok


def distribution(name: str, values, unit: str = "_s") -> dict[str, float]:
    """Percentiles (linear interpolation), mean and max; None values are left out. Numpy keeps a
    long run's ~10^6 gaps at 8 bytes each."""
    x = values if isinstance(values, np.ndarray) else np.array([v for v in values if v is not None], dtype=float)
    if not x.size:
        return {}
    out = {f"{name}_p{q}{unit}": float(v) for q, v in zip(PERCENTILES, np.percentile(x, PERCENTILES))}
    out[f"{name}_mean{unit}"] = float(x.mean())
    out[f"{name}_max{unit}"] = float(x.max())
    return out


def all_gaps(records: list[RequestRecord]) -> np.ndarray:
    """Every inter-token gap of these requests, in one array (no per-gap Python objects)."""
    parts = [np.frombuffer(r.gaps_s, dtype=float) for r in records if len(r.gaps_s)]
    return np.concatenate(parts) if parts else np.empty(0)


def summarize(records: list[RequestRecord], steps: StepLog, makespan_s: float,
              slo: SloConfig, num_chunked_prefills: int = 0) -> dict[str, float]:
    done = [r for r in records if r.status == "finished"]
    good = [r for r in records if meets_slo(r, slo)]
    out: dict[str, float] = {
        "num_requests": len(records), "num_finished": len(done),
        "num_rejected": sum(r.status == "rejected" for r in records),
        "num_unfinished": sum(r.status == "unfinished" for r in records),
        "makespan_s": makespan_s,
        "output_tokens_per_s": sum(r.output_tokens for r in done) / makespan_s if makespan_s else 0.0,
        "requests_per_s": len(done) / makespan_s if makespan_s else 0.0,
        "goodput_req_per_s": len(good) / makespan_s if makespan_s else 0.0,
        "slo_attainment": len(good) / len(records) if records else 0.0,
        "preemptions": sum(r.preemptions for r in done),
    }
    gaps = all_gaps(done)
    out |= distribution("ttft", [r.ttft_s for r in done])
    out |= distribution("itl", gaps)  # every gap of every request: the true inter-token latency
    out |= distribution("tpot", [r.tpot_s for r in done])  # per-request mean gap: the chapter's "ITL"
    out |= distribution("e2e", [r.e2e_s for r in done])
    out |= distribution("queue", [r.queue_s for r in done])
    out |= distribution("slowdown", [r.slowdown for r in done], unit="")
    out["worst_stall_s"] = float(gaps.max()) if gaps.size else 0.0
    for label in sorted({r.label for r in records if r.label}):
        out |= class_summary(label, [r for r in records if r.label == label], slo)
    out |= step_summary(steps, num_chunked_prefills)
    return out


def class_summary(label: str, records: list[RequestRecord], slo: SloConfig) -> dict[str, float]:
    done = [r for r in records if r.status == "finished"]
    p = f"class_{label}_"
    out = {p + "num_requests": len(records), p + "slo_attainment": sum(meets_slo(r, slo) for r in records) / len(records)}
    out |= {p + k: v for k, v in distribution("ttft", [r.ttft_s for r in done]).items()}
    out |= {p + k: v for k, v in distribution("tpot", [r.tpot_s for r in done]).items() if "_p50_" in k}
    out |= {p + k: v for k, v in distribution("itl", all_gaps(done)).items() if "_p99_" in k}
    out |= {p + k: v for k, v in distribution("slowdown", [r.slowdown for r in done], unit="").items()
            if k.endswith(("_p50", "_p99"))}
    return out


def step_summary(steps: StepLog, num_chunked_prefills: int) -> dict[str, float]:
    if not len(steps):
        return {}
    col = steps.arrays()
    tokens = col["num_decode_tokens"] + col["num_prefill_tokens"]
    durations = col["duration_s"]
    return {
        "steps": len(steps),
        "chunked_prefills": num_chunked_prefills,
        "tokens_per_step_mean": float(tokens.mean()),
        "tokens_per_step_max": int(tokens.max()),
        "step_time_p50_s": float(np.percentile(durations, 50)),
        "step_time_p99_s": float(np.percentile(durations, 99)),
        "step_time_max_s": float(durations.max()),
        "running_mean": float(col["num_running"].mean()),
        "busy_s": float(durations.sum()),
        # steps that carry prefill tokens: near 1, a prefill is always in flight and every decode
        # shares its step with one (the chapter's explanation of when a small budget loses)
        "prefill_step_share": float((col["num_prefill_tokens"] > 0).mean()),
    }


def noise_guard(steps: StepLog) -> dict[str, float]:
    """How far measured steps strayed from the profile's prediction (real runs with a profile).

    noisy_steps_share: steps slower than NOISY_STEP_FACTOR x their prediction;
    worst_step_excess: the largest measured / predicted ratio.
    """
    c = steps.columns
    ratios = [d / p for d, p in zip(c["duration_s"], c["predicted_s"]) if p > 0]  # NaN: no prediction
    if not ratios:
        return {}
    return {"noisy_steps_share": sum(r > NOISY_STEP_FACTOR for r in ratios) / len(ratios),
            "worst_step_excess": max(ratios), "step_time_vs_predicted_p50": percentile(ratios, 50)}
