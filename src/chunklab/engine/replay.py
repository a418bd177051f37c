"""Replays timed requests through an engine, on the engine's clock: each request enters at its
arrival time, the engine steps until every request is done. (Not a server: the requests are known
up front, as in a trace replay or a benchmark.)"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from chunklab.engine.engine import LLMEngine
from chunklab.engine.sequence import Request, Sequence
from chunklab.engine.step_log import StepLog


@dataclass
class ReplayResult:
    # one per request, in request order: finished, rejected, or (when stopped early) unfinished
    sequences: list[Sequence]
    steps: StepLog = field(default_factory=StepLog)
    makespan_s: float = 0.0
    stopped: bool = False  # should_stop ended the run before every request was done
    error: Exception | None = None  # a step that raised: the run stopped there, its steps kept


def replay(engine: LLMEngine, requests: list[Request], on_done: Callable[[int], None] | None = None,
           should_stop: Callable[[], bool] | None = None) -> ReplayResult:
    """Runs until every request has finished or been rejected, or should_stop() says stop.

    A request enters the engine at the first step boundary at or after its
    arrival_s; its timings are still measured from arrival_s. should_stop is
    checked between steps, so a stopped run keeps every step it completed.
    """
    pending = deque(sorted(requests, key=lambda r: r.arrival_s))
    sequences: dict[int, Sequence] = {}
    steps = StepLog(with_features=engine.log_features)
    clock = engine.clock
    clock.start()
    stopped, error = False, None
    while pending or engine.has_unfinished:
        if should_stop is not None and should_stop():
            stopped = True
            break
        now = clock.now()
        while pending and pending[0].arrival_s <= now:
            seq = engine.add_request(pending.popleft())
            sequences[seq.seq_id] = seq
            if seq.is_done and on_done:
                on_done(1)
        if not engine.has_unfinished:
            if pending:
                clock.wait_until(pending[0].arrival_s)
            continue
        try:
            record, finished = engine.step()
        except Exception as err:  # noqa: BLE001 - kept and re-raised by the caller after saving
            stopped, error = True, err
            break
        steps.append(record)
        if finished and on_done:
            on_done(len(finished))
    for request in pending:  # never arrived before the stop: still waiting, outside the engine
        sequences[request.request_id] = Sequence(request)
    return ReplayResult([sequences[r.request_id] for r in requests], steps, clock.now(), stopped, error)
