"""Where each request's time went, in five phases that sum to its end-to-end latency:

    prefill_queue_s   arrival -> its first step (on the instance that prefills it)
    prefill_s         that step's start -> its first token
    transfer_s        first token -> its KV arrived at the decode instance (0 when colocated)
    decode_queue_s    KV arrived -> admitted by the decode instance's scheduler (0 when colocated)
    decode_s          admitted (colocated: the first token) -> its last token
"""
from __future__ import annotations

from dataclasses import dataclass

from chunklab.engine.sequence import Phase, Sequence

PHASES = ("prefill_queue_s", "prefill_s", "transfer_s", "decode_queue_s", "decode_s")


@dataclass
class Placement:
    """Where one request went and when it moved (filled in by the cluster as it happens)."""
    prefill_instance: str = ""  # the instance that took it on arrival (colocated: the only one)
    decode_instance: str = ""  # disaggregated: where its KV went ("" until then, and when colocated)
    transfer_start_s: float | None = None
    transfer_end_s: float | None = None
    admitted_s: float | None = None  # the decode instance's step that admitted it started here

    def instances(self) -> dict[str, str]:
        return {"prefill_instance": self.prefill_instance,
                "decode_instance": self.decode_instance or self.prefill_instance}


def phase_seconds(seq: Sequence, where: Placement) -> dict[str, float | None]:
    """PHASES of a finished request (None each for any other)."""
    if seq.phase is not Phase.FINISHED:
        return dict.fromkeys(PHASES)
    arrival, scheduled = seq.request.arrival_s, seq.first_scheduled_s
    first, last = seq.token_times_s[0], seq.token_times_s[-1]
    if where.admitted_s is None:  # colocated, or done at its first token
        return {"prefill_queue_s": scheduled - arrival, "prefill_s": first - scheduled, "transfer_s": 0.0,
                "decode_queue_s": 0.0, "decode_s": last - first}
    return {"prefill_queue_s": scheduled - arrival, "prefill_s": first - scheduled,
            "transfer_s": where.transfer_end_s - first, "decode_queue_s": where.admitted_s - where.transfer_end_s,
            "decode_s": last - where.admitted_s}
