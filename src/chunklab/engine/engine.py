"""The engine: admission checks and the step (schedule, execute, postprocess).

One engine, two executors: the real ModelRunner (torch forward passes, timed by
a wall or replay clock) or the simulated one (no forward pass; a SimClock moved
by the cost model's prediction). The scheduler, block manager and everything
after the engine do not know which ran.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chunklab.config import EngineConfig, ModelConfig, SchedulerConfig
from chunklab.engine.block_manager import BlockManager
from chunklab.engine.policies import StepTimePredictor
from chunklab.cost_models import CostModel
from chunklab.engine.scheduler import Scheduler, StepPlan
from chunklab.engine.sequence import Request, Sequence
from chunklab.cost_models.step_shape import Segment, StepShape


class Executor(Protocol):
    def run(self, plan: StepPlan, mixed_batch: bool) -> dict[int, int]:
        """Executes the plan (mixed_batch: in one forward pass, else decodes, then one pass per
        chunk); returns seq_id -> sampled token for each sequence that samples."""


class Clock(Protocol):
    def start(self) -> None: ...
    def now(self) -> float: ...
    def wait_until(self, t_s: float) -> None: ...
    def advance(self, predicted_s: float | None) -> None: ...


@dataclass(slots=True)  # not frozen: a frozen init costs ~2x, and the simulator makes one per step
class StepRecord:
    start_s: float
    duration_s: float
    num_decode_tokens: int
    num_prefill_tokens: int
    num_prefill_chunks: int
    num_running: int  # after the step
    num_waiting: int
    num_free_blocks: int
    num_preempted: int
    predicted_s: float | None = None  # the cost model's prediction, when a profile applies
    features: list[float] | None = None  # the step's FEATURES (step_shape.py), when the engine logs them


class LLMEngine:
    def __init__(self, model_cfg: ModelConfig, engine_cfg: EngineConfig, sched_cfg: SchedulerConfig,
                 clock: Clock, executor: Executor, cost_model: CostModel | None = None,
                 log_features: bool = False):
        """Built by engine/build.py. log_features: every StepRecord carries its shape's FEATURES (a
        measured run's steps become data a cost model can be fit on; a simulated run needs none)."""
        self.max_seq_len = model_cfg.max_seq_len
        self.block_manager = BlockManager(engine_cfg.num_blocks, engine_cfg.block_size)
        self.scheduler = Scheduler(sched_cfg, self.block_manager, step_time_predictor(cost_model, engine_cfg.mixed_batch))
        self.executor = executor
        self.clock = clock
        self.cost_model = cost_model
        self.log_features = log_features
        self.mixed_batch = engine_cfg.mixed_batch

    def add_request(self, request: Request) -> Sequence:
        """Queues the request, or rejects it (phase REJECTED) if it can never run."""
        seq = Sequence(request)
        reason = self.rejection_reason(request)
        if reason:
            seq.reject(reason)
        else:
            self.scheduler.add(seq)
        return seq

    def rejection_reason(self, request: Request) -> str:
        """Why this engine can never run the request ("" when it can)."""
        num_prompt = len(request.prompt_token_ids)
        # The last sampled token is never fed back, so it needs no position or slot.
        num_positions = num_prompt + request.max_output_tokens - 1
        if num_prompt == 0:
            return "empty prompt"
        if request.max_output_tokens < 1:
            return "max_output_tokens < 1"
        if num_positions > self.max_seq_len:
            return f"prompt {num_prompt} + output {request.max_output_tokens} tokens exceed the model context {self.max_seq_len}"
        num_blocks = self.block_manager.blocks_for_tokens(num_positions)
        if num_blocks > self.block_manager.num_blocks:
            return f"needs {num_blocks} KV blocks, the cache has {self.block_manager.num_blocks}"
        return ""

    def warmup(self) -> None:
        """One short request through the whole path, so a run does not pay torch's first calls."""
        self.add_request(Request(-1, 0.0, tuple(range(32)), 4))
        while self.has_unfinished:
            self.step()
        self.scheduler.reset_stats()

    def reconfigure(self, sched_cfg: SchedulerConfig, mixed_batch: bool) -> None:
        """Scheduler settings and forward batching for the steps to come (the calibration probe
        sets them per step shape)."""
        self.scheduler.reconfigure(sched_cfg)
        self.mixed_batch = mixed_batch

    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.num_unfinished > 0

    def step(self) -> tuple[StepRecord, list[Sequence]]:
        values, features, finished = self.step_values()
        return StepRecord(*values, features=features), finished

    def step_values(self) -> tuple[tuple, list[float] | None, list[Sequence]]:
        """One step, as step() but its record unbuilt: the record's fields before `features` as a tuple in
        their order (StepLog.append_values takes them), the features (None unless logged), the finished
        sequences. The simulator logs every step this way, sparing a StepRecord per step."""
        out = self.try_step_values()
        if out is None:
            raise RuntimeError("scheduler made no progress with unfinished requests")
        return out

    def try_step_values(self) -> tuple[tuple, list[float] | None, list[Sequence]] | None:
        """step_values, or None when the scheduler planned nothing (nothing ran, the clock did not move):
        a prefill instance whose free blocks are all out with KV being sent waits for a transfer to end."""
        start_s = self.clock.now()
        plan = self.scheduler.schedule()
        if plan.is_empty:
            return None
        shape = None
        if self.log_features or self.cost_model:  # read before the step runs (counters say what is cached)
            shape = StepShape.of(plan, self.mixed_batch)
        predicted_s = self.cost_model.predict(shape) if self.cost_model else None
        sampled = self.executor.run(plan, self.mixed_batch)
        self.clock.advance(predicted_s)  # moves only a simulated clock
        end_s = self.clock.now()
        finished = self.scheduler.postprocess(plan, sampled, start_s, end_s)
        duration_s = self.clock.now() - start_s  # a wall clock's includes postprocess
        if predicted_s is not None:
            self.scheduler.observe_step(duration_s, predicted_s)
        values = (start_s, duration_s,
                  plan.num_decode_tokens, plan.num_prefill_tokens, len(plan.prefills), self.scheduler.num_running,
                  self.scheduler.num_waiting, self.block_manager.num_free_blocks, len(plan.preempted), predicted_s)
        return values, shape.features() if self.log_features else None, finished


def step_time_predictor(cost_model: CostModel | None, mixed_batch: bool) -> StepTimePredictor | None:
    """The cost model as the scheduler's budget policies ask it (policies/base.py: StepTimePredictor);
    None without one. The chunk is priced as one segment that does not sample (a step's chunks
    together: the policy decides their total)."""
    if cost_model is None:
        return None

    def predict(decode_ctx: list[int], prefill_tokens: int, cached_tokens: int) -> float:
        segments = (Segment(prefill_tokens, cached_tokens, False),) if prefill_tokens else ()
        return cost_model.predict(StepShape(tuple(decode_ctx), segments, mixed_batch))
    return predict
