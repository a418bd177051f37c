"""The worst stall the schedule caused, apart from the machine's: a measured gap is the VM's (steal,
another process) when it ran more than NOISY_STEP_FACTOR x what the profile predicts for the steps
inside it.

A token gap (a, b] of one request spans the steps that start in [a, b): the one after the step that
emitted the token at a, up to the one that emitted the token at b (a replay steps back to back while
a request runs, so nothing else lies between them). Their predicted times sum to what the schedule
alone would make that gap. A budget decides a step's shape, so its prediction; it cannot make a step
run ten times its prediction, which a stolen time slice does (docs/troubleshooting.md: ~100 ms at any
budget, 2-3 a run here). The worst stall of a run is a maximum, so one such slice decides it whatever
the budget: the guarded one leaves out the gaps the machine stretched, and says how many it left out.

Only a single engine's measured steps carry what this needs (a prediction per step, one timeline);
a simulated step runs exactly its prediction, and a cluster's steps interleave instances.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from chunklab.engine.step_log import StepLog
from chunklab.metrics.records import RequestRecord
from chunklab.metrics.summary import NOISY_STEP_FACTOR


def guarded(steps: StepLog) -> bool:
    """Whether these steps can judge gaps: one engine's timeline, every step predicted."""
    if "instance" in steps.columns or not len(steps):
        return False
    return not np.isnan(steps.arrays()["predicted_s"]).any()


def noisy_gaps(times_s, starts_s: np.ndarray, predicted_cumsum_s: np.ndarray) -> np.ndarray:
    """For one request's token times (ascending), whether each gap ran more than NOISY_STEP_FACTOR x
    the predicted time of the steps starting inside it. starts_s: every step's start, ascending;
    predicted_cumsum_s: the running sum of their predictions, with a leading 0 (len(starts_s) + 1)."""
    t = np.asarray(times_s, dtype=float)
    first = np.searchsorted(starts_s, t[:-1], side="left")  # the first step starting at or after a
    last = np.searchsorted(starts_s, t[1:], side="left")  # the first step starting at or after b
    predicted = predicted_cumsum_s[last] - predicted_cumsum_s[first]
    return np.diff(t) > NOISY_STEP_FACTOR * predicted


def with_clean_gaps(records: list[RequestRecord], sequences, steps: StepLog) -> list[RequestRecord]:
    """records (in the order of sequences, the run's) with max_clean_gap_s and num_noisy_gaps set on
    every finished request with gaps; unchanged where the steps cannot judge (see guarded)."""
    if not guarded(steps):
        return records
    col = steps.arrays()
    starts = col["start_s"]
    cumsum = np.concatenate([[0.0], np.cumsum(col["predicted_s"])])
    out = []
    for r, seq in zip(records, sequences):
        if r.status != "finished" or len(seq.token_times_s) < 2:
            out.append(r)
            continue
        noisy = noisy_gaps(seq.token_times_s, starts, cumsum)
        clean = np.diff(np.asarray(seq.token_times_s, dtype=float))[~noisy]
        out.append(dataclasses.replace(r, max_clean_gap_s=float(clean.max()) if clean.size else 0.0,  # none clean: none counts
                                       num_noisy_gaps=int(noisy.sum())))
    return out


def stall_summary(records: list[RequestRecord]) -> dict[str, float]:
    """worst_clean_stall_s: the longest gap of any request the machine did not stretch;
    noisy_gap_share: of every gap, those left out. Empty where no record was judged."""
    judged = [r for r in records if r.num_noisy_gaps is not None]
    if not judged:
        return {}
    gaps = sum(len(r.gaps_s) for r in judged)
    return {"worst_clean_stall_s": max(r.max_clean_gap_s or 0.0 for r in judged),
            "noisy_gap_share": sum(r.num_noisy_gaps for r in judged) / gaps if gaps else 0.0}
