"""What a request would take alone: calibrated on the idle engine after a run.

Slowdown = a request's end-to-end latency in the run / its latency alone. Alone
latency is modelled as TTFT_alone(prompt tokens), interpolated between a few
measured prompt lengths, plus (output tokens - 1) x the measured batch-1 gap.
Measured on the same engine and config, so a chunked prefill is chunked alone too.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from chunklab.engine.replay import replay
from chunklab.engine.sequence import Request
from chunklab.metrics.records import RequestRecord, percentile

CALIBRATION_POINTS = 5
CALIBRATION_OUTPUT_TOKENS = 8


@dataclass(frozen=True)
class IsolatedLatency:
    prompt_tokens: tuple[int, ...]  # calibrated prompt lengths, ascending
    ttft_s: tuple[float, ...]  # TTFT alone at each
    gap_s: float  # batch-1 inter-token gap alone

    @classmethod
    def measure(cls, engine, requests: list[Request]) -> "IsolatedLatency":
        lengths = sorted({len(r.prompt_token_ids) for r in requests})
        grid = sorted({int(percentile(lengths, q)) for q in (0, 25, 50, 75, 100)})[:CALIBRATION_POINTS]
        ttfts, gaps = [], []
        for n in grid:
            seq = replay(engine, [Request(-1, 0.0, requests[0].prompt_token_ids[:1] * n, CALIBRATION_OUTPUT_TOKENS)]).sequences[0]
            ttfts.append(seq.token_times_s[0])
            gaps += [b - a for a, b in zip(seq.token_times_s, seq.token_times_s[1:])]
        return cls(tuple(grid), tuple(ttfts), statistics.median(gaps))

    def ttft_alone_s(self, prompt_tokens: int) -> float:
        xs, ys = self.prompt_tokens, self.ttft_s
        if prompt_tokens <= xs[0] or len(xs) == 1:
            return ys[0]
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            if prompt_tokens <= x1:
                return y0 + (y1 - y0) * (prompt_tokens - x0) / (x1 - x0)
        return ys[-1] * prompt_tokens / xs[-1]

    def e2e_alone_s(self, prompt_tokens: int, output_tokens: int) -> float:
        return self.ttft_alone_s(prompt_tokens) + (output_tokens - 1) * self.gap_s


def with_slowdown(records: list[RequestRecord], alone: IsolatedLatency) -> list[RequestRecord]:
    return [dataclasses.replace(r, slowdown=r.e2e_s / alone.e2e_alone_s(r.prompt_tokens, r.output_tokens))
            if r.status == "finished" else r for r in records]
