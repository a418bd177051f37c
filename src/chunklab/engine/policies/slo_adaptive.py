"""A budget from the SLO: each step takes the largest prefill chunk whose predicted step time keeps
the running decodes' next gap within the target (scheduler.gap_target_s, set from the SLO in force:
its per-request p99 gap, else its mean gap). With no decode running, or no prefill pending, the
step takes up to scheduler.budget (the whole pending prefill where it fits).

What the target bounds (scheduler.gap_target_kind, from the SLO): a p99 or stall bound holds every
gap to it ("step"). A mean-gap (TPOT) bound holds each request's mean ("mean"): a request whose gaps
so far ran under the target may spend what they saved on the next one, so the step is cut to what the
least-ahead running request can spend, never below the target. Holding every gap to a mean bound cut
chunks that no request's SLO asked to cut, and the prompts behind them broke their TTFT instead.

The chunk is solved for, not searched: the step time is predicted at three chunk sizes (1, half
and all of what is pending), and the quadratic through them is solved for the target. A step's
work is quadratic in its chunk (attention pairs grow with chunk x context, the rest linearly), so
for the profile's linear cost model (cost_models/linear.py) the quadratic is its prediction
exactly; for the roofline, whose max() of compute and memory bends the curve, it is an estimate.

The machine the profile was calibrated on drifts (a VM's speed moves 10-70% within minutes), so the
policy reads its own engine: after each step it cut to the target, the step's measured seconds over
the prediction. The target is divided by the DRIFT_QUANTILE of the last DRIFT_WINDOW_STEPS such
ratios, in steps of 1% (a simulated engine's steps take their predictions exactly: 1.00, no change).
"""
import math
from collections import deque
from itertools import chain

from chunklab.config import SchedulerConfig
from chunklab.engine.policies.base import BudgetPolicy, StepTimePredictor
from chunklab.engine.sequence import Phase, Sequence

# The prediction is aimed this far under the target: a step over the target is a gap over the SLO for
# every running decode, and a step's measured time scatters around the drift-corrected prediction.
HEADROOM = 0.8
# The drift correction: the 90th percentile of measured / predicted over the last 32 steps the target
# cut (about a second of serving at a 30 ms gap target), from the 8th such step on.
DRIFT_WINDOW_STEPS = 32
DRIFT_QUANTILE = 0.9
DRIFT_MIN_STEPS = 8
# The least a pending prefill gets where even one token would break the target (the running
# decodes alone fill it): one KV block a step, so no prompt waits forever behind a full batch.
MIN_CHUNK_TOKENS = 16


class SloAdaptiveBudget(BudgetPolicy):
    name = "slo_adaptive"
    needs_step_time = True
    needs_gap_target = True

    def __init__(self, cfg: SchedulerConfig, step_time: StepTimePredictor | None = None):
        super().__init__(cfg, step_time)
        self.speed_factor = 1.0  # measured / predicted, as the drift correction reads it now
        self._ratios: deque[float] = deque(maxlen=DRIFT_WINDOW_STEPS)
        self._cut = False  # whether the step being run was cut to the target

    def observe_step(self, measured_s: float, predicted_s: float) -> None:
        if not self._cut or predicted_s <= 0:
            return
        self._ratios.append(measured_s / predicted_s)
        if len(self._ratios) >= DRIFT_MIN_STEPS:
            ordered = sorted(self._ratios)
            self.speed_factor = round(ordered[int(DRIFT_QUANTILE * (len(ordered) - 1))], 2)

    def step_budget(self, running: list[Sequence], waiting: deque[Sequence]) -> int:
        self._cut = False
        cap = self.cfg.budget
        decoding = [s for s in running if s.phase is Phase.DECODING]
        if not decoding:
            return cap
        decode_ctx = [s.num_computed_tokens + 1 for s in decoding]
        first, pending = None, 0  # the prefill that takes the chunk first, and how much is pending (up to cap)
        for seq in chain((s for s in running if s.phase is Phase.PREFILLING), waiting):
            if first is None:
                first = seq
            pending += seq.num_prefill_remaining
            if pending >= cap:
                break
        room = min(cap - len(decode_ctx), pending)
        if room <= 0:
            return cap
        target_s = self.cfg.gap_target_s
        if self.cfg.gap_target_kind == "mean":
            target_s = min(mean_gap_room_s(s, target_s) for s in decoding)
        chunk = largest_chunk(lambda n: self.step_time(decode_ctx, n, first.num_computed_tokens),
                              HEADROOM * target_s / self.speed_factor, room)
        self._cut = chunk < room
        return len(decode_ctx) + chunk


def mean_gap_room_s(seq: Sequence, target_s: float) -> float:
    """The longest next gap that keeps seq's mean gap so far within target_s: its gaps so far may sum to
    target_s each, and what they left unspent goes to the next one. Its last token ended the step
    before this one, so the gap is this step (at least target_s: a mean bound allows every gap that)."""
    times = seq.token_times_s
    gaps = len(times) - 1
    return max(target_s, target_s * (gaps + 1) - (times[-1] - times[0]))


def largest_chunk(step_s, target_s: float, most: int) -> int:
    """The largest n in [1, most] with step_s(n) <= target_s, step_s increasing and quadratic in n
    (three calls); MIN_CHUNK_TOKENS (at most `most`) where step_s(1) is already over."""
    t_most = step_s(most)
    if t_most <= target_s:
        return most
    t_one = step_s(1)
    if t_one > target_s or most <= 2:
        return min(most, MIN_CHUNK_TOKENS) if t_one > target_s else 1
    mid = (1 + most) // 2
    t_mid = step_s(mid)
    # Newton's form through (1, t_one), (mid, t_mid), (most, t_most): t(n) = t_one + b (n - 1) + a (n - 1)(n - mid)
    b = (t_mid - t_one) / (mid - 1)
    a = ((t_most - t_mid) / (most - mid) - b) / (most - 1)
    # a n^2 + q n + r = 0 with n measured from 1: a x^2 + (b - a (mid - 1)) x + (t_one - target) = 0, x = n - 1
    q, r = b - a * (mid - 1), t_one - target_s
    if abs(a) < 1e-18:
        roots = [-r / q]
    else:
        sq = math.sqrt(max(q * q - 4 * a * r, 0.0))
        roots = [(-q + sq) / (2 * a), (-q - sq) / (2 * a)]
    inside = [x for x in roots if 0 <= x <= most - 1]
    # none inside only through rounding at an end: the line through the end points then
    x = min(inside) if inside else (target_s - t_one) / (t_most - t_one) * (most - 1)
    return max(1, min(most - 1, int(x) + 1))
