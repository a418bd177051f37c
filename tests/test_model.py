"""TinyGPT against an oracle nobody here wrote: transformers' LlamaForCausalLM."""
import dataclasses
import pytest
import torch

from chunklab.model.attention import AttentionMetadata, DecodeBatch, PrefillSegment
from chunklab.config import TinyGPTConfig
from chunklab.model.tiny_gpt import TinyGPT
from helpers import MICRO

transformers = pytest.importorskip("transformers")
from chunklab.model.hf_export import to_llama  # noqa: E402


@pytest.fixture(scope="module")
def models():
    model = TinyGPT.from_seed(TinyGPTConfig(), seed=0)
    return model, to_llama(model)


def test_reference_parameter_count():
    assert TinyGPT.from_seed(TinyGPTConfig(), seed=0).num_parameters() == 5_838_080


def test_seed_fixes_weights():
    a, b, c = (TinyGPT.from_seed(MICRO, seed) for seed in (1, 1, 2))
    assert torch.equal(a.lm_head, b.lm_head)
    assert not torch.equal(a.lm_head, c.lm_head)


def _pool(cfg, num_slots):
    shape = (cfg.num_layers, num_slots, cfg.num_kv_heads, cfg.head_dim)
    return torch.zeros(shape), torch.zeros(shape)


def _scattered_slots(n, num_slots=4096, block=16, seed=0):
    """Slots of n positions over randomly placed blocks, as a paged cache lays them."""
    blocks = torch.randperm(num_slots // block, generator=torch.Generator().manual_seed(seed))
    pos = torch.arange(n)
    return blocks[pos // block] * block + pos % block


@torch.inference_mode()
def test_full_prompt_logits_match_llama(models):
    model, llama = models
    ids = torch.randint(0, 260, (700,), generator=torch.Generator().manual_seed(1))
    ref = llama(ids[None]).logits[0]
    slots = _scattered_slots(700)
    meta = AttentionMetadata(slots, None, [PrefillSegment(0, 700, 700, None)])
    ours = model.logits(model(ids, torch.arange(700), meta, _pool(model.cfg, 4096)))
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)


@torch.inference_mode()
def test_chunked_prefill_then_decode_match_llama(models):
    model, llama = models
    prompt, new = 333, 5
    ids = torch.randint(0, 260, (prompt + new,), generator=torch.Generator().manual_seed(2))
    ref = llama(ids[None]).logits[0]  # teacher-forced: logits at every position
    slots = _scattered_slots(prompt + new)
    kv = _pool(model.cfg, 4096)
    got = []
    for start in range(0, prompt, 64):  # chunked prefill through the paged cache
        end = min(prompt, start + 64)
        ctx = slots[:end] if start > 0 else None
        meta = AttentionMetadata(slots[start:end], None, [PrefillSegment.build(0, end - start, end, ctx)])
        got.append(model.logits(model(ids[start:end], torch.arange(start, end), meta, kv)))
    for pos in range(prompt, prompt + new):  # then decode one token at a time
        valid = torch.ones(1, pos + 1, dtype=torch.bool)
        meta = AttentionMetadata(slots[pos:pos + 1], DecodeBatch.build(slots[None, :pos + 1], valid))
        got.append(model.logits(model(ids[pos:pos + 1], torch.tensor([pos]), meta, kv)))
    torch.testing.assert_close(torch.cat(got), ref, atol=1e-4, rtol=0)


@torch.inference_mode()
def test_naive_attention_matches_sdpa(models):
    model, _ = models
    ids = torch.randint(0, 260, (200,), generator=torch.Generator().manual_seed(3))
    slots = torch.arange(200)
    out = {}
    for impl in ("sdpa", "naive"):
        kv = _pool(model.cfg, 256)
        a = model(ids[:120], torch.arange(120), AttentionMetadata(slots[:120], None, [PrefillSegment(0, 120, 120, None)], impl), kv)
        b = model(ids[120:], torch.arange(120, 200), AttentionMetadata(slots[120:], None, [PrefillSegment.build(0, 80, 200, slots)], impl), kv)
        out[impl] = torch.cat([a, b])
    torch.testing.assert_close(out["naive"], out["sdpa"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sizes_by_arithmetic_match_the_torch_model(dtype):
    """A simulated run counts parameters and KV bytes without torch: the arithmetic must agree."""
    from chunklab.config import EngineConfig
    from chunklab.engine.executors.model_runner import ModelRunner
    from chunklab.model.sizes import kv_cache_bytes, num_parameters
    from helpers import MICRO

    for model in (MICRO, dataclasses.replace(MICRO, name="tiny", num_layers=6, d_model=256, num_heads=8,
                                             head_dim=32, mlp_hidden=1024)):
        model = dataclasses.replace(model, dtype=dtype)
        engine = EngineConfig(num_blocks=32)
        runner = ModelRunner(model, engine)
        assert num_parameters(model) == runner.model.num_parameters()
        assert kv_cache_bytes(model, engine) == runner.kv_cache_bytes


@pytest.mark.parametrize("rows, k, n", [(1, 256, 384), (96, 256, 2048), (1536, 1024, 256)])
def test_both_gemm_libraries_the_perf_peak_measures_compute_the_same_product(rows, k, n):
    """The perf stage states ratios against the better of MKL and oneDNN: both must compute x @ w.T."""
    from chunklab import bench

    torch.manual_seed(0)
    x, w = torch.randn(rows, k), torch.randn(n, k)
    want = x.double() @ w.double().T
    for library in bench.GEMM_LIBRARIES:
        got = bench.gemm_fn(library, x, w)()
        assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-3), library
