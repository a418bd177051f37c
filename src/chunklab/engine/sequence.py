"""A request (immutable input) and its sequence (mutable serving state)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto


@dataclass(frozen=True)
class Request:
    request_id: int
    arrival_s: float  # when the request arrived, on the run's clock (trace time)
    prompt_token_ids: tuple[int, ...]
    max_output_tokens: int  # generation stops here (EOS is ignored, benchmark mode)
    label: str = ""  # workload class, e.g. "long" / "short", for per-class metrics


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
    token_ids: list[int] = field(default_factory=list)  # prompt + generated
    num_computed_tokens: int = 0  # tokens whose K/V are in the cache
    # Tokens that must be cached before the next sample. Set on (re)admission and
    # never derived from len(token_ids), which grows with every generated token.
    prefill_target: int = 0
    block_table: list[int] = field(default_factory=list)
    num_preemptions: int = 0
    first_scheduled_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)
    finish_s: float | None = None
    reject_reason: str = ""

    def __post_init__(self):
        if not self.token_ids:
            self.token_ids = list(self.request.prompt_token_ids)
        self.prefill_target = len(self.token_ids)

    @property
    def seq_id(self) -> int:
        return self.request.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.request.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_prefill_remaining(self) -> int:
        return self.prefill_target - self.num_computed_tokens

    @property
    def is_done(self) -> bool:
        return self.phase in (Phase.FINISHED, Phase.REJECTED)

    def start_prefill(self) -> None:
        assert self.phase is Phase.WAITING
        self.phase = Phase.PREFILLING

    def append_token(self, token_id: int, time_s: float) -> None:
        """Record a sampled token; leaves prefill, and finishes at the output length."""
        self.token_ids.append(token_id)
        self.token_times_s.append(time_s)
        if self.num_output_tokens >= self.request.max_output_tokens:
            self.phase = Phase.FINISHED
            self.finish_s = time_s
        else:
            self.phase = Phase.DECODING

    def preempt(self) -> None:
        """Recompute preemption: the cache is dropped, generated tokens are kept."""
        self.phase = Phase.WAITING
        self.num_computed_tokens = 0
        self.prefill_target = len(self.token_ids)
        self.block_table = []
        self.num_preemptions += 1

    def reject(self, reason: str) -> None:
        self.phase = Phase.REJECTED
        self.reject_reason = reason
