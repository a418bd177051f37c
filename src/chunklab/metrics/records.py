"""Per-request records: everything metrics need, computed from sequences once.

Metrics never look at the engine again, so the same code scores a live run,
a replayed trace, or records loaded back from requests.csv.
"""
from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field

from chunklab.engine.sequence import Phase, Sequence


@dataclass(frozen=True)
class RequestRecord:
    request_id: int
    label: str
    status: str  # finished | rejected | unfinished (the run was stopped first)
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None = None  # first token minus arrival
    tpot_s: float | None = None  # mean gap between output tokens (needs >= 2 tokens)
    e2e_s: float | None = None  # last token minus arrival
    queue_s: float | None = None  # first scheduled minus arrival
    max_gap_s: float | None = None  # this request's worst stall between two tokens
    itl_p99_s: float | None = None  # p99 of this request's gaps
    # e2e over the e2e the same request takes alone on the idle engine (when measured)
    slowdown: float | None = None
    preemptions: int = 0
    output_digest: str = ""  # hash of the generated ids: equal digests = equal outputs
    reason: str = ""  # why a request did not finish: its rejection, or where the stop found it
    # a measured run's worst gap the machine did not stretch, and how many it did (metrics/stalls.py);
    # None where not judged (simulated, a cluster, no profile)
    max_clean_gap_s: float | None = None
    num_noisy_gaps: int | None = None
    gaps_s: array = field(default_factory=lambda: array("d"), repr=False)  # every inter-token gap


def output_digest(token_ids: list[int]) -> str:
    return hashlib.sha1(",".join(map(str, token_ids)).encode()).hexdigest()[:16]


def percentile(values, q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of a non-empty sequence."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def record(seq: Sequence) -> RequestRecord:
    req = seq.request
    base = dict(request_id=req.request_id, label=req.label, arrival_s=req.arrival_s,
                prompt_tokens=seq.num_prompt_tokens, output_tokens=seq.num_output_tokens)
    if seq.phase is Phase.REJECTED:
        return RequestRecord(status="rejected", reason=seq.reject_reason, **base)
    if seq.phase is not Phase.FINISHED:
        where = (f"{seq.phase.name.lower()}, {seq.num_output_tokens}/{req.max_output_tokens} tokens"
                 if seq.phase is not Phase.WAITING or seq.num_output_tokens else "waiting")
        return RequestRecord(status="unfinished", reason=f"run stopped while {where}", **base)
    return timed_record(req, seq.num_prompt_tokens, seq.token_times_s, seq.first_scheduled_s,
                        seq.num_preemptions, output_digest(seq.output_token_ids))


def timed_record(req, prompt_tokens: int, times, first_scheduled_s: float, preemptions: int = 0,
                 digest: str = "") -> RequestRecord:
    """A finished request's record from its output tokens' timestamps (on the run's clock): the one
    definition of TTFT, TPOT and every gap, for our engine and for a peer's timestamps alike."""
    gaps = array("d", (b - a for a, b in zip(times, times[1:])))
    return RequestRecord(
        request_id=req.request_id, label=req.label, arrival_s=req.arrival_s, prompt_tokens=prompt_tokens,
        output_tokens=len(times), status="finished",
        ttft_s=times[0] - req.arrival_s,
        tpot_s=(times[-1] - times[0]) / len(gaps) if gaps else None,
        e2e_s=times[-1] - req.arrival_s,
        queue_s=first_scheduled_s - req.arrival_s,
        max_gap_s=max(gaps) if gaps else None,
        itl_p99_s=percentile(gaps, 99) if gaps else None,
        preemptions=preemptions,
        output_digest=digest,
        gaps_s=gaps,
    )
