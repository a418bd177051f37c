"""Times real engine steps of chosen shapes.

The probe stages sequences in the engine's scheduler (Scheduler.stage) in exactly the state
in which its next schedule() plans the wanted shape, then times engine.step():
the same schedule + forward + postprocess a serving run times. KV contents are
whatever the pool holds: step time depends on shapes, not values.
"""
from __future__ import annotations

import statistics

from chunklab.config import EngineConfig, ModelConfig, SchedulerConfig
from chunklab.engine.build import build_engine
from chunklab.engine.sequence import Request
from chunklab.cost_models.step_shape import StepShape

FILLER_TOKEN = 7
NEVER_ENDS = 1 << 20  # a probe's decode must not finish and free its blocks mid-probe
LEAD_IN_STEPS = 2  # decode steps the rows of a timed step run just before it


class ShapeProbe:
    def __init__(self, model: ModelConfig, engine: EngineConfig):
        """engine: calibration's own (profile.calibration_engine), never a run's pool or scheduler."""
        self.engine = build_engine(model, engine, SchedulerConfig())
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
        """Adds the shape's sequences to those running (num_decodes of them already decoding), with a
        budget and limits under which the next step plans exactly them."""
        num_seqs = num_decodes + len(shape.decode_ctx_lens) + len(shape.segments)
        self.engine.reconfigure(SchedulerConfig(budget=num_decodes + shape.num_tokens, max_num_seqs=num_seqs,
                                                max_partial_prefills=num_seqs), shape.mixed_batch)
        sched = self.engine.scheduler
        for ctx in shape.decode_ctx_lens:  # DECODING the token at position ctx - 1
            sched.stage(self._request(ctx - 1, NEVER_ENDS), ctx - 1, decoding=True, token_id=FILLER_TOKEN)
        for seg in shape.segments:
            prompt = seg.num_cached + seg.num_tokens + (0 if seg.samples else 1)
            sched.stage(self._request(prompt, 2), seg.num_cached)

    def _request(self, num_prompt: int, max_output: int) -> Request:
        self._next_id += 1
        return Request(self._next_id, 0.0, (FILLER_TOKEN,) * num_prompt, max_output)

    def _clear(self) -> None:
        self.engine.scheduler.release_all()
        assert self.engine.block_manager.num_used_blocks == 0


def profile_shapes(model: ModelConfig, engine: EngineConfig, shapes: list[StepShape],
                   rounds: int, burst: int, progress=None) -> tuple[list[float], str]:
    """Median step time of each shape, and the forward path that ran them.

    A step's time depends on what ran just before it (caches): measured on the eager
    path, a batch-1 decode took 1.84 ms after another one and 2.36 ms right after a
    512-token prefill. So every timed step follows its lead-in (ShapeProbe.time_step);
    each round times burst - 1 steps per shape, and rounds interleave every shape, so
    slow drift of a shared machine spreads over all of them.
    """
    probe = ShapeProbe(model, engine)
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
