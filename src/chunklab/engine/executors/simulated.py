"""The simulated executor: no forward pass, placeholder tokens.

The engine ignores EOS (every request generates exactly max_output_tokens), so
output lengths and every scheduling decision are independent of token values:
a placeholder id per sampled token changes nothing the scheduler sees. The
step's duration comes from the cost model, applied by the engine to its SimClock.
"""
from __future__ import annotations

from operator import attrgetter

from chunklab.engine.scheduler import StepPlan

_SEQ_ID = attrgetter("seq_id")

PLACEHOLDER_TOKEN = 0
NOTE = ("simulated run: no forward pass ran; step durations are the profile's predictions and generated "
        "token ids are placeholders (EOS is ignored, so lengths and scheduling do not depend on them)")


class SimulatedExecutor:
    def run(self, plan: StepPlan, mixed_batch: bool) -> dict[int, int]:
        sampled = dict.fromkeys(map(_SEQ_ID, plan.decodes), PLACEHOLDER_TOKEN)  # ~256 a step at production scale
        sampled.update((c.seq.seq_id, PLACEHOLDER_TOKEN) for c in plan.prefills if c.is_last)
        return sampled
