"""Synthetic workloads: length-class mixtures and arrival processes. No torch."""
from __future__ import annotations

import random

from chunklab.config import WorkloadConfig
from chunklab.engine.sequence import Request

BYTE_VOCAB = 256  # prompts are drawn from byte ids; ids above are special tokens


def arrival_times(cfg: WorkloadConfig, rng: random.Random) -> list[float]:
    """Arrival offsets in seconds; the first request arrives at 0."""
    n = cfg.num_requests
    if cfg.arrival == "all_at_once":
        return [0.0] * n
    times, t = [0.0], 0.0
    for _ in range(n - 1):
        if cfg.arrival == "poisson":
            t += rng.expovariate(cfg.rate_per_s)
        else:  # gamma with mean gap 1/rate; shape = burstiness (1 is Poisson)
            t += rng.gammavariate(cfg.burstiness, 1.0 / (cfg.rate_per_s * cfg.burstiness))
        times.append(t)
    return times


def prompt_ids(seed: int, index: int, num_tokens: int, vocab_size: int) -> bytes:
    """Byte ids (a byte vocabulary: one byte a token in memory). Seeded per request (string
    seeds hash stably): no two prompts share a prefix by accident, and request i is the
    same whatever num_requests is."""
    rng = random.Random(f"prompt-{seed}-{index}")
    if vocab_size >= BYTE_VOCAB:
        return rng.randbytes(num_tokens)
    return bytes(rng.randrange(vocab_size) for _ in range(num_tokens))


def synthetic_requests(cfg: WorkloadConfig, vocab_size: int) -> list[Request]:
    rng = random.Random(cfg.seed)
    times = arrival_times(cfg, rng)
    weights = [c.weight for c in cfg.classes]
    requests = []
    for i, arrival_s in enumerate(times):
        cls = rng.choices(cfg.classes, weights=weights)[0]
        num_prompt = rng.randint(cls.min_tokens, cls.max_tokens)
        num_output = rng.randint(cfg.min_output_tokens, cfg.max_output_tokens)
        requests.append(Request(i, arrival_s, prompt_ids(cfg.seed, i, num_prompt, vocab_size), num_output, cls.label))
    return requests
