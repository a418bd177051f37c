"""A request (immutable input) and its sequence (mutable serving state)."""
from __future__ import annotations

from array import array
from collections.abc import Sequence as IdSequence
from dataclasses import dataclass, field
from enum import Enum, auto


@dataclass(frozen=True)
class Request:
    request_id: int
    arrival_s: float  # when the request arrived, on the run's clock (trace time)
    prompt_token_ids: IdSequence[int]  # bytes for byte-vocab prompts: 1 byte a token, not 8
    max_output_tokens: int  # generation stops here (EOS is ignored, benchmark mode)
    label: str = ""  # workload class, e.g. "long" / "short", for per-class metrics

    def __reduce__(self):
        # pickled by its fields (a measured cluster's workers): compiled (compiled_core.py), a frozen
        # dataclass cannot be restored attribute by attribute
        return Request, (self.request_id, self.arrival_s, self.prompt_token_ids, self.max_output_tokens, self.label)


class Phase(Enum):
    WAITING = auto()  # queued; also where a preempted sequence goes back to
    PREFILLING = auto()  # admitted; num_computed_tokens < prefill_target
    DECODING = auto()  # one token per step
    FINISHED = auto()
    REJECTED = auto()  # never admitted; reject_reason says why


@dataclass(eq=False)
class Sequence:
    request: Request
    phase: Phase = Phase.WAITING
    # The prompt stays in the request (never copied: a 20,000-request trace holds ~10M
    # prompt tokens); the sequence's tokens are the prompt, then these.
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    # Tokens that must be cached before the next sample. Set on (re)admission and
    # never derived from num_tokens, which grows with every generated token.
    prefill_target: int = 0
    block_table: list[int] = field(default_factory=list)
    num_preemptions: int = 0
    first_scheduled_s: float | None = None
    token_times_s: array = field(default_factory=lambda: array("d"))  # when each output token was sampled
    finish_s: float | None = None
    reject_reason: str = ""

    def __post_init__(self):
        self.prefill_target = self.num_tokens

    @property
    def seq_id(self) -> int:
        return self.request.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + len(self.output_token_ids)

    @property
    def last_token_id(self) -> int:
        return self.output_token_ids[-1] if self.output_token_ids else self.request.prompt_token_ids[-1]

    def token_slice(self, start: int, end: int) -> IdSequence[int]:
        """Token ids [start, end) of prompt + output."""
        prompt = self.request.prompt_token_ids
        if end <= len(prompt):
            return prompt[start:end]
        return list(prompt[start:]) + self.output_token_ids[max(0, start - len(prompt)):end - len(prompt)]

    @property
    def num_prefill_remaining(self) -> int:
        return self.prefill_target - self.num_computed_tokens

    @property
    def is_done(self) -> bool:
        return self.phase in (Phase.FINISHED, Phase.REJECTED)

    def start_prefill(self) -> None:
        assert self.phase is Phase.WAITING
        self.phase = Phase.PREFILLING

    def mark_scheduled(self, time_s: float) -> None:
        """A step that computes part of this sequence started at time_s (the first one is kept)."""
        if self.first_scheduled_s is None:
            self.first_scheduled_s = time_s

    def mark_computed(self, num_tokens: int) -> None:
        """num_tokens more of this sequence's tokens have their K/V in the cache."""
        self.num_computed_tokens += num_tokens

    def append_token(self, token_id: int, time_s: float) -> None:
        """Record a sampled token; leaves prefill, and finishes at the output length."""
        self.output_token_ids.append(token_id)
        self.token_times_s.append(time_s)
        if len(self.output_token_ids) >= self.request.max_output_tokens:
            self.phase = Phase.FINISHED
            self.finish_s = time_s
        else:
            self.phase = Phase.DECODING

    def preempt(self) -> None:
        """Recompute preemption: the cache is dropped, generated tokens are kept."""
        self.phase = Phase.WAITING
        self.num_computed_tokens = 0
        self.prefill_target = self.num_tokens
        self.block_table = []
        self.num_preemptions += 1

    def reject(self, reason: str) -> None:
        self.phase = Phase.REJECTED
        self.reject_reason = reason
