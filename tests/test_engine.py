"""Chunking, batching and preemption must never change what is generated, on either forward
path: eager torch ops (float64 micro model) and the fused C++ forward (float32, engine.compile)."""
import dataclasses
from typing import NamedTuple

import pytest
import torch

from chunklab.config import EngineConfig, ModelConfig
from chunklab.engine.sequence import Phase, Request
from helpers import MICRO, outputs, requests, run_engine


class Path(NamedTuple):
    model: ModelConfig
    engine: EngineConfig

    def run(self, reqs, model=None, **engine_and_sched):
        engine = {k: v for k, v in engine_and_sched.items() if k in EngineConfig.__dataclass_fields__}
        sched = {k: v for k, v in engine_and_sched.items() if k not in engine}
        return run_engine(reqs, model=model or self.model, engine=dataclasses.replace(self.engine, **engine), **sched)


PATHS = {"eager": Path(MICRO, EngineConfig(compile=False)),
         # auto: this machine's GEMM library per batch size, so steps of one run may mix both
         "fused": Path(dataclasses.replace(MICRO, dtype="float32"), EngineConfig(compile=True))}
ONEDNN = Path(dataclasses.replace(MICRO, dtype="float32"), EngineConfig(linear_library="onednn"))


@pytest.fixture(scope="module", params=list(PATHS))
def path(request):
    return PATHS[request.param]


@pytest.fixture(scope="module")
def reqs():
    return requests()


@pytest.fixture(scope="module")
def baseline(reqs, path):
    eng, result = path.run(reqs, budget=8192)
    assert eng.executor.forward_path.startswith("fused (linear " if path.engine.compile else "eager")
    return outputs(result)


@pytest.mark.parametrize("budget", [8, 13, 64, 512, 8192])
def test_outputs_identical_across_budgets(reqs, baseline, path, budget):
    eng, result = path.run(reqs, budget=budget)
    assert outputs(result) == baseline
    if budget <= 64:
        assert eng.scheduler.stats().num_chunked_prefills > 0  # the long prompts really were chunked


def test_onednn_outputs_identical_across_budgets(reqs):
    """Every linear layer through oneDNN, whatever this machine's probe chose."""
    want = outputs(ONEDNN.run(reqs, budget=8192)[1])
    for budget in (8, 64, 512):
        eng, result = ONEDNN.run(reqs, budget=budget)
        assert outputs(result) == want and eng.executor.forward_path == "fused (linear onednn)"


@pytest.mark.parametrize("sched", [
    dict(ordering="prefill_first"),
    dict(admission="shortest_prompt_first"),
    dict(max_partial_prefills=4),
    dict(max_partial_prefills=4, long_prefill_threshold=32),
    dict(max_num_seqs=3),
])
def test_outputs_identical_across_policies(reqs, baseline, path, sched):
    _, result = path.run(reqs, budget=48, **sched)
    assert outputs(result) == baseline


def test_outputs_identical_without_mixed_batch(reqs, baseline, path):
    _, result = path.run(reqs, mixed_batch=False, budget=48)
    assert outputs(result) == baseline


def test_outputs_identical_under_preemption(path):
    reqs = requests(arrival="all_at_once")  # all in flight at once: memory pressure
    _, unpressured = path.run(reqs, budget=8192)
    # 40 blocks of 8 tokens hold one long request (<= 312 tokens), never two.
    eng, result = path.run(reqs, num_blocks=40, block_size=8, budget=64, max_partial_prefills=4)
    assert eng.scheduler.stats().num_preemptions > 0
    assert outputs(result) == outputs(unpressured)
    assert sum(s.num_preemptions for s in result.sequences) == eng.scheduler.stats().num_preemptions
    assert eng.block_manager.num_free_blocks == 40


def test_naive_attention_generates_the_same(reqs, baseline, path):
    # naive attention is an eager-only ablation: with compile on, the runner takes the eager path for it
    _, result = path.run(reqs, model=dataclasses.replace(path.model, attention="naive"), budget=64)
    assert outputs(result) == baseline


def test_every_request_finishes_with_its_output_length(reqs, path):
    _, result = path.run(reqs, budget=16)
    for seq, req in zip(result.sequences, reqs):
        assert seq.phase is Phase.FINISHED
        assert seq.num_output_tokens == req.max_output_tokens == len(seq.token_times_s)
        assert seq.first_scheduled_s >= req.arrival_s
        assert list(seq.token_times_s) == sorted(seq.token_times_s)


def test_overlong_requests_are_rejected_with_a_reason():
    reqs = [Request(0, 0.0, (1,) * 500, 20), Request(1, 0.0, (2,) * 10, 5), Request(2, 0.1, (3,) * 100, 5)]
    eng, result = run_engine(reqs, engine=EngineConfig(num_blocks=4, block_size=16), budget=64)
    phases = [s.phase for s in result.sequences]
    assert phases == [Phase.REJECTED, Phase.FINISHED, Phase.REJECTED]
    assert "model context 512" in result.sequences[0].reject_reason
    assert "KV blocks" in result.sequences[2].reject_reason


def test_temperature_sampling_is_seeded_and_batch_invariant(reqs, path):
    _, a = path.run(reqs, temperature=0.8, sampling_seed=7, budget=8192)
    _, b = path.run(reqs, temperature=0.8, sampling_seed=7, budget=24)
    _, c = path.run(reqs, temperature=0.8, sampling_seed=8, budget=8192)
    assert outputs(a) == outputs(b) != outputs(c)


def test_greedy_generation_matches_llama_generate():
    pytest.importorskip("transformers")
    from chunklab.model.hf_export import to_llama

    model_cfg = ModelConfig(dtype="float64")
    reqs = [Request(i, 0.0, tuple(range(i * 7, i * 7 + n)), 6) for i, n in enumerate([40, 75])]
    eng, result = run_engine(reqs, model=model_cfg, budget=16)
    llama = to_llama(eng.executor.model)
    for req, seq in zip(reqs, result.sequences):
        ids = torch.tensor([list(req.prompt_token_ids)])
        ref = llama.generate(ids, max_new_tokens=6, do_sample=False, attention_mask=torch.ones_like(ids))
        assert seq.output_token_ids == ref[0, ids.shape[1]:].tolist()
