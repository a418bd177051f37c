"""Step shapes to profile: a structured grid plus random steps drawn the way the
scheduler builds them (decodes first, then one in-flight prefill, then admissions).
Plain Python: a seeded Random, no torch."""
from __future__ import annotations

import random

from chunklab.cost_models.step_shape import Segment, StepShape

BUDGETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 8192)


def grid_shapes(max_seqs: int, max_seq_len: int) -> list[StepShape]:
    out = []
    for b in sorted({1, 2, 4, max_seqs}):
        for ctx in (16, 128, 512, 1024, 1600, max_seq_len):
            out.append(StepShape((ctx,) * b, (), True))
    for n in (16, 32, 64, 128, 256, 512, 1024, 1536, max_seq_len):
        out.append(StepShape((), (Segment(n, 0, True),), True))
    for n in (16, 64, 256, 512):
        for cached in (64, 512, 1024, 1536):
            if cached + n <= max_seq_len:
                out.append(StepShape((), (Segment(n, cached, True),), True))
    for n in (56, 504, 1536):
        out.append(StepShape((1600,) * max_seqs, (Segment(n, 0, False),), True))
        out.append(StepShape((1600,) * 2, (Segment(n, 0, False),), False))
    return out


def random_shape(rng: random.Random, max_seqs: int, max_seq_len: int) -> StepShape:
    budget = rng.choice(BUDGETS)
    num_decode = rng.randint(0, min(max_seqs - 1, budget))
    # a decoding sequence is either a long prompt or a short one, with up to 64 tokens generated
    ctx = tuple(rng.choice((rng.randint(1536, 1600), rng.randint(16, 96), rng.randint(97, max_seq_len)))
                for _ in range(num_decode))
    left = budget - num_decode
    segments = []
    if left > 0 and rng.random() < 0.6:  # the in-flight prefill, oldest first
        prompt = rng.choice((1536, rng.randint(64, max_seq_len)))
        cached = rng.choice((0, min(prompt - 1, left * rng.randint(1, 24))))
        n = min(left, prompt - cached)
        segments.append(Segment(n, cached, n == prompt - cached))
        left -= n
    while left > 0 and num_decode + len(segments) < max_seqs and rng.random() < 0.7:  # admissions
        prompt = rng.choice((rng.randint(16, 32), rng.randint(16, 32), 1536, rng.randint(33, max_seq_len)))
        n = min(left, prompt)
        segments.append(Segment(n, 0, n == prompt))
        left -= n
        if n < prompt:
            break
    if not ctx and not segments:
        return random_shape(rng, max_seqs, max_seq_len)
    # The scheduler only leaves the last chunk of a step unfinished: put any unfinished one last.
    segments.sort(key=lambda s: not s.samples)
    return StepShape(ctx, tuple(segments), rng.random() < 0.8)


def calibration_shapes(seed: int, num_random: int, max_seqs: int, max_seq_len: int) -> list[StepShape]:
    rng = random.Random(seed)
    shapes = grid_shapes(max_seqs, max_seq_len) + [random_shape(rng, max_seqs, max_seq_len) for _ in range(num_random)]
    return [s for s in shapes if _fits(s, max_seq_len)]


def _fits(shape: StepShape, max_seq_len: int) -> bool:
    segs_ok = all(s.num_cached + s.num_tokens + (not s.samples) <= max_seq_len for s in shape.segments)
    unfinished = [i for i, s in enumerate(shape.segments) if not s.samples]
    return segs_ok and all(c <= max_seq_len for c in shape.decode_ctx_lens) and unfinished in ([], [len(shape.segments) - 1])
