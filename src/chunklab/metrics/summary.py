"""Run-level aggregates from request records and step records."""
from __future__ import annotations

from chunklab.config import SloConfig
from chunklab.engine.engine import StepRecord
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


def distribution(name: str, values, unit: str = "_s") -> dict[str, float]:
    values = [v for v in values if v is not None]
    if not values:
        return {}
    out = {f"{name}_p{q}{unit}": percentile(values, q) for q in PERCENTILES}
    out[f"{name}_mean{unit}"] = sum(values) / len(values)
    out[f"{name}_max{unit}"] = max(values)
    return out


def summarize(records: list[RequestRecord], steps: list[StepRecord], makespan_s: float,
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
    gaps = [g for r in done for g in r.gaps_s]
    out |= distribution("ttft", [r.ttft_s for r in done])
    out |= distribution("itl", gaps)  # every gap of every request: the true inter-token latency
    out |= distribution("tpot", [r.tpot_s for r in done])  # per-request mean gap: the chapter's "ITL"
    out |= distribution("e2e", [r.e2e_s for r in done])
    out |= distribution("queue", [r.queue_s for r in done])
    out |= distribution("slowdown", [r.slowdown for r in done], unit="")
    out["worst_stall_s"] = max(gaps) if gaps else 0.0
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
    out |= {p + k: v for k, v in distribution("itl", [g for r in done for g in r.gaps_s]).items() if "_p99_" in k}
    out |= {p + k: v for k, v in distribution("slowdown", [r.slowdown for r in done], unit="").items()
            if k.endswith(("_p50", "_p99"))}
    return out


def step_summary(steps: list[StepRecord], num_chunked_prefills: int) -> dict[str, float]:
    if not steps:
        return {}
    tokens = [s.num_decode_tokens + s.num_prefill_tokens for s in steps]
    durations = [s.duration_s for s in steps]
    return {
        "steps": len(steps),
        "chunked_prefills": num_chunked_prefills,
        "tokens_per_step_mean": sum(tokens) / len(tokens),
        "tokens_per_step_max": max(tokens),
        "step_time_p50_s": percentile(durations, 50),
        "step_time_p99_s": percentile(durations, 99),
        "step_time_max_s": max(durations),
        "running_mean": sum(s.num_running for s in steps) / len(steps),
        "busy_s": sum(durations),
    }


def noise_guard(steps: list[StepRecord]) -> dict[str, float]:
    """How far measured steps strayed from the profile's prediction (real runs with a profile).

    noisy_steps_share: steps slower than NOISY_STEP_FACTOR x their prediction;
    worst_step_excess: the largest measured / predicted ratio.
    """
    ratios = [s.duration_s / s.predicted_s for s in steps if s.predicted_s]
    if not ratios:
        return {}
    return {"noisy_steps_share": sum(r > NOISY_STEP_FACTOR for r in ratios) / len(ratios),
            "worst_step_excess": max(ratios), "step_time_vs_predicted_p50": percentile(ratios, 50)}
