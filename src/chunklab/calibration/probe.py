"""Times real engine steps of chosen shapes.

The probe puts sequences into the engine's scheduler in exactly the state in
which its next schedule() plans the wanted shape, then times engine.step():
the same schedule + forward + postprocess a serving run times. KV contents are
whatever the pool holds: step time depends on shapes, not values.
"""
from __future__ import annotations

import dataclasses
import statistics

from chunklab.config import EngineConfig, ModelConfig, SchedulerConfig
from chunklab.engine.clock import ReplayClock
from chunklab.engine.engine import LLMEngine
from chunklab.engine.sequence import Request, Sequence
from chunklab.engine.step_shape import StepShape

FILLER_TOKEN = 7
NEVER_ENDS = 1 << 20  # a probe's decode must not finish and free its blocks mid-probe


class ShapeProbe:
    def __init__(self, model: ModelConfig, engine: EngineConfig):
        self.engine = LLMEngine(model, engine, SchedulerConfig(), ReplayClock())
        self.engine.warmup()
        self._next_id = 0

    def time_step(self, shape: StepShape) -> float:
        """Seconds of one engine step of this shape."""
        self._stage(shape)
        self.engine.clock.start()
        record, _ = self.engine.step()
        self._clear()
        got = (record.num_decode_tokens, record.num_prefill_tokens, record.num_prefill_chunks)
        want = (len(shape.decode_ctx_lens), shape.num_tokens - len(shape.decode_ctx_lens), len(shape.segments))
        assert got == want, f"probe planned {got}, wanted {want} for {shape}"
        return record.duration_s

    def _stage(self, shape: StepShape) -> None:
        sched, bm = self.engine.scheduler, self.engine.block_manager
        num_seqs = len(shape.decode_ctx_lens) + len(shape.segments)
        sched.cfg = SchedulerConfig(budget=shape.num_tokens, max_num_seqs=num_seqs, max_partial_prefills=num_seqs)
        self.engine.executor.mixed_batch = shape.mixed_batch
        for ctx in shape.decode_ctx_lens:
            seq = self._cached_sequence(ctx - 1, ctx - 1, NEVER_ENDS)
            seq.append_token(FILLER_TOKEN, 0.0)  # now DECODING the token at position ctx - 1
            sched.running.append(seq)
        for seg in shape.segments:
            prompt = seg.num_cached + seg.num_tokens + (0 if seg.samples else 1)
            sched.running.append(self._cached_sequence(prompt, seg.num_cached, 2))

    def _cached_sequence(self, num_prompt: int, num_cached: int, max_output: int) -> Sequence:
        self._next_id += 1
        seq = Sequence(Request(self._next_id, 0.0, (FILLER_TOKEN,) * num_prompt, max_output))
        self.engine.block_manager.allocate(seq, num_cached)
        seq.num_computed_tokens = num_cached
        seq.start_prefill()
        return seq

    def _clear(self) -> None:
        sched = self.engine.scheduler
        for seq in sched.running:
            self.engine.block_manager.free(seq)
        sched.running.clear()
        assert not sched.waiting and self.engine.block_manager.num_used_blocks == 0


def lead_in(shape: StepShape) -> StepShape:
    """The step a serving run has just run before one of this shape: its decode rows decoding alone
    (a prefill chunk joins a run of decode steps), or, with no decode rows, the shape itself."""
    return StepShape(shape.decode_ctx_lens, (), shape.mixed_batch) if shape.decode_ctx_lens else shape


def profile_shapes(model: ModelConfig, engine: EngineConfig, shapes: list[StepShape],
                   rounds: int, burst: int) -> tuple[list[float], str]:
    """Median step time of each shape, and the forward path that ran them.

    A step's time depends on what ran just before it (caches): measured here, a batch-1
    decode takes 1.84 ms after another one and 2.36 ms right after a 512-token prefill.
    So every timed step follows its lead-in, the step a serving run has just run before
    such a step; each round times burst - 1 such pairs per shape, and rounds interleave
    every shape, so slow drift of a shared machine spreads over all of them.
    """
    probe = ShapeProbe(model, dataclasses.replace(engine, executor="torch"))
    for shape in shapes[:5]:  # first calls of each kernel size pay one-off costs
        probe.time_step(shape)
    times: list[list[float]] = [[] for _ in shapes]
    for _ in range(rounds):
        for i, shape in enumerate(shapes):
            before = lead_in(shape)
            for _ in range(burst - 1):
                probe.time_step(before)
                times[i].append(probe.time_step(shape))
    return [statistics.median(t) for t in times], probe.engine.executor.forward_path
