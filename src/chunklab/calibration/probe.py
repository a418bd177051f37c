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
LEAD_IN_STEPS = 2  # decode steps the rows of a timed step run just before it


class ShapeProbe:
    def __init__(self, model: ModelConfig, engine: EngineConfig):
        self.engine = LLMEngine(model, engine, SchedulerConfig(), ReplayClock())
        self.engine.warmup()
        self._next_id = 0

    def time_step(self, shape: StepShape) -> float:
        """Seconds of one engine step of this shape, run right after its lead-in.

        As in serving, the decode rows have been decoding: they are staged LEAD_IN_STEPS
        positions back and decode that many steps alone, then the prefill chunks join and
        the step is timed. (Timed as the first step over freshly staged sequences, a batch
        of 8 decodes at 1600 tokens took 5.2 ms against 4.1 ms in a steady serving loop, and
        the fused engine's decode steps in serving ran 16% under the profile's predictions;
        after one lead-in step on the same sequences, 4.6 ms.) With no decode rows the
        lead-in is the shape itself on other sequences."""
        self.engine.executor.mixed_batch = shape.mixed_batch
        if shape.decode_ctx_lens:
            back = LEAD_IN_STEPS if min(shape.decode_ctx_lens) > LEAD_IN_STEPS else 0
            self._stage(StepShape(tuple(c - back for c in shape.decode_ctx_lens), (), shape.mixed_batch))
            for _ in range(back):  # now the rows decode at the shape's contexts
                self.engine.step()
        else:
            self._stage(shape)
            self.engine.step()
            self._clear()
        self._stage(StepShape((), shape.segments, shape.mixed_batch), num_decodes=len(shape.decode_ctx_lens))
        self.engine.clock.start()
        record, _ = self.engine.step()
        self._clear()
        got = (record.num_decode_tokens, record.num_prefill_tokens, record.num_prefill_chunks)
        want = (len(shape.decode_ctx_lens), shape.num_tokens - len(shape.decode_ctx_lens), len(shape.segments))
        assert got == want, f"probe planned {got}, wanted {want} for {shape}"
        return record.duration_s

    def _stage(self, shape: StepShape, num_decodes: int = 0) -> None:
        """Adds the shape's sequences to those running (num_decodes of them already decoding)."""
        sched = self.engine.scheduler
        num_seqs = num_decodes + len(shape.decode_ctx_lens) + len(shape.segments)
        sched.cfg = SchedulerConfig(budget=num_decodes + shape.num_tokens, max_num_seqs=num_seqs,
                                    max_partial_prefills=num_seqs)
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


def profile_shapes(model: ModelConfig, engine: EngineConfig, shapes: list[StepShape],
                   rounds: int, burst: int, progress=None) -> tuple[list[float], str]:
    """Median step time of each shape, and the forward path that ran them.

    A step's time depends on what ran just before it (caches): measured on the eager
    path, a batch-1 decode took 1.84 ms after another one and 2.36 ms right after a
    512-token prefill. So every timed step follows its lead-in (ShapeProbe.time_step);
    each round times burst - 1 steps per shape, and rounds interleave every shape, so
    slow drift of a shared machine spreads over all of them.
    """
    probe = ShapeProbe(model, dataclasses.replace(engine, executor="torch"))
    for shape in shapes[:5]:  # first calls of each kernel size pay one-off costs
        probe.time_step(shape)
    times: list[list[float]] = [[] for _ in shapes]
    for _ in range(rounds):
        for i, shape in enumerate(shapes):
            for _ in range(burst - 1):
                times[i].append(probe.time_step(shape))  # each after its lead-in
            if progress:
                progress(1)
    return [statistics.median(t) for t in times], probe.engine.executor.forward_path
