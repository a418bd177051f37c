"""The shape of a step: what its forward pass(es) compute, as plain numbers.

A step's duration depends on its shape, never on token values: how many decode
rows and how much context they read, and for each prefill chunk its length and
its cached prefix. The cost model predicts from this; calibration measures it.
Plain Python, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


# Work features of one step, summed over its forward passes. Names carry what they count.
FEATURES = (
    "forwards",          # forward passes (fixed dispatch cost each)
    "tokens",            # rows through the linear layers
    "sampled_rows",      # rows through the LM head and the sampler
    "decode_rows",       # decode tokens
    "decode_ctx_padded", # decode rows x the batch's longest context (eager: K/V gathered, padded)
    "decode_ctx",        # decode contexts summed (fused: each row reads its own blocks in place)
    "segments",          # prefill chunks (one attention call each)
    "causal_pairs",      # query-key pairs of chunks with no cached prefix (causal SDPA)
    "cached_pairs",      # query-key pairs of chunks with a cached prefix (masked SDPA)
    "cached_ctx",        # cached positions gathered for those chunks
)


class Segment(NamedTuple):  # a tuple: the simulator builds one per chunk every step
    num_tokens: int  # chunk length
    num_cached: int  # tokens of the sequence already in the KV cache before this chunk
    samples: bool  # the chunk ends the prefill, so the step samples a token for it


@dataclass(frozen=True)
class StepShape:
    decode_ctx_lens: tuple[int, ...]  # per decode row: cached tokens + the one decoded
    segments: tuple[Segment, ...]
    mixed_batch: bool  # one forward for everything (else decodes, then one forward per chunk)

    @classmethod
    def of(cls, plan, mixed_batch: bool) -> "StepShape":
        """The shape of a scheduler's StepPlan (engine/scheduler.py), read before the step runs: the
        sequences' counters still say what is cached."""
        return cls(tuple([s.num_computed_tokens + 1 for s in plan.decodes]),  # a list first: faster than a generator
                   tuple([Segment(c.num_tokens, c.seq.num_computed_tokens, c.is_last) for c in plan.prefills]),
                   mixed_batch)

    @property
    def num_tokens(self) -> int:
        return len(self.decode_ctx_lens) + sum(s.num_tokens for s in self.segments)

    def features(self) -> list[float]:
        """FEATURES of this step, in order (computed once: the cost model and the step log both read
        them; callers must not change the list)."""
        cached = self.__dict__.get("_feature_values")
        if cached is None:
            cached = self._features()
            object.__setattr__(self, "_feature_values", cached)  # a cache beside the frozen fields, not one of them
        return cached

    def _features(self) -> list[float]:
        if self.mixed_batch:  # one pass (the simulator's every step): its features are the step's, as the
            # sum below would give them (adding counts to zeros changes no bit: never -0.0 or NaN)
            return list(_pass_features(self.decode_ctx_lens, self.segments))
        passes = ([(self.decode_ctx_lens, ())] if self.decode_ctx_lens else []) + [((), (s,)) for s in self.segments]
        total = [0.0] * len(FEATURES)
        for ctx_lens, segs in passes:
            for i, value in enumerate(_pass_features(ctx_lens, segs)):
                total[i] += value
        return total


def _pass_features(ctx_lens: tuple[int, ...], segs: tuple[Segment, ...]) -> tuple[float, ...]:
    num_decode = len(ctx_lens)
    tokens = sampled = causal = cached_pairs = cached_ctx = 0
    for s in segs:  # one pass: the simulator evaluates this every step
        tokens += s.num_tokens
        sampled += s.samples
        if s.num_cached:
            context = s.num_cached + s.num_tokens
            cached_pairs += s.num_tokens * context
            cached_ctx += context
        else:
            causal += s.num_tokens * (s.num_tokens + 1) / 2
    return (1.0, float(num_decode + tokens), float(num_decode + sampled), float(num_decode),
            float(num_decode * max(ctx_lens, default=0)), float(sum(ctx_lens)), float(len(segs)), float(causal),
            float(cached_pairs), float(cached_ctx))
