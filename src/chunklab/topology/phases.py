"""Where each request's time went, in six phases that sum to its end-to-end latency:

    prefill_queue_s   arrival -> its first step (on the instance that prefills it)
    prefill_s         that step's start -> its first token
    kv_wait_s         first token -> its transfer started: the wait for blocks on the decode
                      instance to hold its KV (simulated; 0 when colocated and when measured)
    transfer_s        transfer started -> its KV arrived at the decode instance (0 when colocated)
    decode_queue_s    KV arrived -> admitted by the decode instance's scheduler (0 when colocated)
    decode_s          admitted (colocated: the first token) -> its last token

transfer_s, the contract both clusters keep with the link that prices it:
- simulated (simulated.py): the link's seconds, shared with the transfers in flight on its ports
  (links.py: SharedLinks; the `shm` preset is fit by
  experiments/shm_link.py on one message to the receiver + its read of the blocks out of the sender's
  shared pool + its write of them into its own pool).
- measured (measured.py, worker.py): the first token -> the decode instance has read the blocks out of
  the prefill's shared pool (transfer_end_s), plus kv_write_s, the seconds it took to write them into
  its own pool, which it does when its scheduler admits the sequence: the same two copies the fit
  times. Beyond the fit it holds a second message (prefill -> coordinator -> decode) and the wait for
  the decode instance's step in progress, which the twin does not model. decode_queue_s is the wait
  from the read to the write's start: the phases still sum to the request's end-to-end latency.
"""
from __future__ import annotations

from dataclasses import dataclass

from chunklab.engine.sequence import Phase, Sequence

PHASES = ("prefill_queue_s", "prefill_s", "kv_wait_s", "transfer_s", "decode_queue_s", "decode_s")


@dataclass
class Placement:
    """Where one request went and when it moved (filled in by the cluster as it happens)."""
    prefill_instance: str = ""  # the instance that took it on arrival (colocated: the only one)
    decode_instance: str = ""  # disaggregated: where its KV went ("" until then, and when colocated)
    transfer_start_s: float | None = None
    transfer_end_s: float | None = None
    admitted_s: float | None = None  # the decode instance's step that admitted it started here
    kv_write_s: float = 0.0  # measured: the decode instance's write of the KV into its pool, at admission

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
        return {"prefill_queue_s": scheduled - arrival, "prefill_s": first - scheduled, "kv_wait_s": 0.0,
                "transfer_s": 0.0, "decode_queue_s": 0.0, "decode_s": last - first}
    arrived = where.transfer_end_s + where.kv_write_s  # the KV in the decode instance's pool (docstring)
    return {"prefill_queue_s": scheduled - arrival, "prefill_s": first - scheduled,
            "kv_wait_s": where.transfer_start_s - first, "transfer_s": arrived - where.transfer_start_s,
            "decode_queue_s": where.admitted_s - arrived, "decode_s": last - where.admitted_s}
