"""The fused C++ forward (engine.compile=true) against the transformers oracle and the eager model."""
import dataclasses
import logging

import pytest
import torch
import torch.nn.functional as F

from chunklab.config import EngineConfig, TinyGPTConfig
from chunklab.engine.executors.model_runner import ModelRunner
from chunklab.model import kv_layout, native
from chunklab.model.attention import AttentionMetadata, DecodeBatch, PrefillSegment
from chunklab.model.linear_library import LinearPlan
from chunklab.model.tiny_gpt import TinyGPT
from helpers import MICRO

BLOCK = 16


@pytest.fixture(scope="module")
def tiny():
    return TinyGPT.from_seed(TinyGPTConfig(), seed=0)


def _history(cfg, seed, num_blocks=256, block=BLOCK):
    """A slot-major pool (the eager model's layout) with random, non-zero history in every slot."""
    kv = kv_layout.slot_major_pool(cfg.num_layers, num_blocks, block, cfg.num_kv_heads, cfg.head_dim)
    for t in kv:
        t.copy_(torch.randn(t.shape, generator=torch.Generator().manual_seed(seed)))
    return kv


def _tables(num_seqs, num_blocks, pool_blocks=256, seed=0):
    """Disjoint, randomly placed blocks per sequence: [num_seqs, num_blocks] int32."""
    perm = torch.randperm(pool_blocks, generator=torch.Generator().manual_seed(seed))
    return perm[:num_seqs * num_blocks].view(num_seqs, num_blocks).to(torch.int32)


def _slots(table_row, start, end, block=BLOCK):
    pos = torch.arange(start, end)
    return table_row.long()[pos // block] * block + pos % block


def test_the_layouts_convert_both_ways():
    """Slot s = block * bs + offset of head h lands at k[l, h, block, :, offset] and v[l, h, block, offset]."""
    k, v = _history(dataclasses.replace(MICRO, num_kv_heads=2), seed=3, num_blocks=5, block=8)
    kb, vb = kv_layout.to_blocked((k, v), 8)
    assert kb.shape == (MICRO.num_layers, 2, 5, MICRO.head_dim, 8) and vb.shape == (MICRO.num_layers, 2, 5, 8, 16)
    torch.testing.assert_close(kb[1, 1, 3, :, 5], k[1, 3 * 8 + 5, 1], rtol=0, atol=0)
    torch.testing.assert_close(vb[1, 1, 3, 5], v[1, 3 * 8 + 5, 1], rtol=0, atol=0)
    torch.testing.assert_close(kb[1, 0, 3, :, 5], k[1, 3 * 8 + 5, 0], rtol=0, atol=0)  # head-major: heads apart
    back = kv_layout.to_slot_major((kb, vb))
    assert torch.equal(back[0], k) and torch.equal(back[1], v)


# Every GEMM library the fused forward can route its linear layers through (model/linear_library.py).
LIBRARIES = pytest.mark.parametrize("library", ["mkl", "onednn", "panels"])


@LIBRARIES
@torch.inference_mode()
def test_prompt_then_decode_logits_match_llama(tiny, library):
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from chunklab.model.hf_export import to_llama

    fused = native.FusedForward(tiny, BLOCK, LinearPlan.single(library))
    prompt, new = 333, 4
    ids = torch.randint(0, 260, (prompt + new,), generator=torch.Generator().manual_seed(2))
    ref = to_llama(tiny)(ids[None]).logits[0]
    c = tiny.cfg
    table, kv, got = _tables(1, 22), kv_layout.blocked_pool(c.num_layers, 256, BLOCK, c.num_kv_heads, c.head_dim), []
    for start in range(0, prompt, 64):  # chunks through the paged cache, then one token at a time
        end = min(prompt, start + 64)
        got.append(tiny.logits(fused(ids[start:end], table, [start], [end - start], 0, kv)))
    for pos in range(prompt, prompt + new):
        got.append(tiny.logits(fused(ids[pos:pos + 1], table, [pos], [1], 1, kv)))
    torch.testing.assert_close(torch.cat(got), ref, atol=1e-4, rtol=0)


def _eager_mixed_step(model, ids, table, contexts, chunk, kv, block=BLOCK):
    """The eager model on one mixed step: decodes at `contexts`, then one chunk (start, n)."""
    B = len(contexts)
    width = max(contexts) + 1
    dec_slots = torch.stack([F.pad(_slots(table[b], 0, c + 1, block), (0, width - c - 1))
                             for b, c in enumerate(contexts)])
    valid = torch.arange(max(contexts) + 1)[None, :] <= torch.tensor(contexts)[:, None]
    new_slots = torch.stack([_slots(table[b], c, c + 1, block)[0] for b, c in enumerate(contexts)])
    start, n = chunk
    seg_slots = _slots(table[B], 0, start + n, block)
    meta = AttentionMetadata(torch.cat([new_slots, seg_slots[start:]]), DecodeBatch.build(dec_slots, valid),
                             [PrefillSegment.build(B, B + n, start + n, seg_slots if start else None)])
    positions = torch.cat([torch.tensor(contexts), torch.arange(start, start + n)])
    return model(ids, positions, meta, kv)


@pytest.mark.parametrize("shape", [
    dict(),  # the micro model: head_dim 16, 2 query heads per KV head (vector kernel)
    dict(num_heads=8, num_kv_heads=1, head_dim=24, d_model=96),  # head_dim 24: the scalar kernel
    dict(num_heads=4, num_kv_heads=4, head_dim=32, d_model=128),  # no GQA
])
# a first chunk; one after a cached prefix. 5 decodes + 36 = 41 rows: oneDNN pads them to 42 (onednn_rows)
@pytest.mark.parametrize("chunk", [(0, 36), (53, 29)])
@LIBRARIES
@pytest.mark.parametrize("prefill_attention", ["paged", "sdpa"])
@torch.inference_mode()
def test_mixed_step_matches_the_eager_model(shape, chunk, library, prefill_attention):
    cfg = dataclasses.replace(MICRO, dtype="float32", **shape)
    model = TinyGPT.from_seed(cfg, seed=4)
    contexts = [0, 15, 16, 40, 77]  # decode positions: block edges, first token, a few blocks in
    _check_mixed_step(model, contexts, chunk, library, prefill_attention, BLOCK)


def _check_mixed_step(model, contexts, chunk, library, prefill_attention, block):
    """The fused forward against the eager model on one mixed step over the same history: the same
    hidden states and the same cache writes (the fused pool is blocked, the eager one slot-major)."""
    table = _tables(len(contexts) + 1, -(-(max(contexts + [sum(chunk)]) + 1) // block), seed=1)
    kv_eager = _history(model.cfg, seed=5, block=block)
    kv_fused = kv_layout.to_blocked(kv_eager, block)
    n = len(contexts) + chunk[1]
    ids = torch.randint(0, 260, (n,), generator=torch.Generator().manual_seed(6))
    want = _eager_mixed_step(model, ids, table, contexts, chunk, kv_eager, block)
    fused = native.FusedForward(model, block, LinearPlan.single(library), prefill_attention)
    got = fused(ids, table, contexts + [chunk[0]], [1] * len(contexts) + [chunk[1]], len(contexts), kv_fused)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for written, expected in zip(kv_layout.to_slot_major(kv_fused), kv_eager):  # same cache writes, K and V
        torch.testing.assert_close(written, expected, atol=1e-6, rtol=1e-5)


@LIBRARIES
@torch.inference_mode()
def test_sampled_rows_and_the_reused_scratch(library):
    """The forward returns the final-norm hidden states of the rows asked for, exactly those of a
    call that returns every row; steps of up to 512 rows run in the forward's reused scratch, and
    what a call returned is its own (a later call leaves it as it was); a longer step allocates. A row
    outside the step is refused before the KV cache is written."""
    model = TinyGPT.from_seed(dataclasses.replace(MICRO, dtype="float32", max_seq_len=1024), seed=4)
    fused = native.FusedForward(model, BLOCK, LinearPlan.single(library))
    c = model.cfg
    table = _tables(1, 70, seed=3)
    ids = torch.randint(0, 260, (1100,), generator=torch.Generator().manual_seed(9))

    def step(start, n, rows=None):  # a chunk of n tokens at start, on a fresh copy of one pool
        kv = kv_layout.blocked_pool(c.num_layers, 256, BLOCK, c.num_kv_heads, c.head_dim)
        return fused(ids[start:start + n].clone(), table, [start], [n], 0, kv, rows)

    every = step(0, 48)
    assert every.shape == (48, c.d_model) and fused.scratch.numel() > 0
    grown = fused.scratch.numel()
    picked = step(0, 48, [47, 3, 20])
    assert torch.equal(picked, every[[47, 3, 20]])
    assert step(0, 48, []).shape == (0, c.d_model)  # a chunk that does not end its prompt samples nothing
    kept = picked.clone()
    step(0, 31)  # another step in the same scratch
    assert torch.equal(picked, kept)
    long_rows = step(0, 600, [599, 0])  # past 512 rows: its own buffer, the scratch not grown for it
    assert torch.equal(long_rows, step(0, 600)[[599, 0]]) and fused.scratch.numel() == grown
    assert torch.equal(step(0, 48), every)  # the scratch after a long step: the same results
    kv = kv_layout.blocked_pool(c.num_layers, 256, BLOCK, c.num_kv_heads, c.head_dim)
    with pytest.raises(RuntimeError, match="sample row 48"):  # checked before the forward writes anything
        fused(ids[:48].clone(), table, [0], [48], 0, kv, [48])
    assert not kv[0].any() and not kv[1].any()
    with pytest.raises(RuntimeError, match="position 1024 is past the RoPE table"):
        step(1000, 25)


@pytest.mark.parametrize("block", [8, 32])  # 8: under a 16-float vector (AVX-512 takes 8-float ones); 32: 2 per block
@pytest.mark.parametrize("shape", [dict(), dict(num_heads=8, num_kv_heads=2, head_dim=32, d_model=128)])
@pytest.mark.parametrize("prefill_attention", ["paged", "sdpa"])
@torch.inference_mode()
def test_other_block_sizes_match_the_eager_model(block, shape, prefill_attention):
    model = TinyGPT.from_seed(dataclasses.replace(MICRO, dtype="float32", **shape), seed=4)
    _check_mixed_step(model, [0, 7, 8, 40, 77], (53, 29), "mkl", prefill_attention, block)


def _by_prefill_attention(model, new_pool, ids, table, starts, num_tokens, num_decodes):
    """The same step through the fused forward once per prefill attention (sdpa, paged), each on a
    fresh KV pool from new_pool(), linear layers through MKL: {attention: hidden states}."""
    out = {}
    for attention in ("sdpa", "paged"):
        fused = native.FusedForward(model, BLOCK, LinearPlan.single("mkl"), attention)
        out[attention] = fused(ids, table, starts, num_tokens, num_decodes, new_pool())
    return out


@pytest.mark.parametrize("shape", [
    dict(),  # the micro model: head_dim 16, 2 query heads per KV head
    dict(num_heads=8, num_kv_heads=2, head_dim=32, d_model=128),  # TinyGPT's heads
    dict(num_heads=2, num_kv_heads=2, head_dim=64, d_model=128),  # no GQA
    dict(num_heads=8, num_kv_heads=1, head_dim=128, d_model=128),  # a Llama head, 8 queries per KV head
])
@torch.inference_mode()
def test_paged_prefill_attention_matches_sdpa_on_a_busy_step(shape):
    """Three chunks in one step beside two decodes: a first chunk, one after a cached prefix that
    ends mid-block, and a single-token chunk deep in its context (row counts that fill no row
    block evenly). The paged kernel against ATen's SDPA on the same step, and the same cache."""
    cfg = dataclasses.replace(MICRO, dtype="float32", **shape)
    model = TinyGPT.from_seed(cfg, seed=4)
    contexts, chunks = [3, 70], [(0, 37), (53, 29), (200, 1)]
    table = _tables(len(contexts) + len(chunks), 14, seed=2)
    history = kv_layout.to_blocked(_history(cfg, seed=7), BLOCK)
    n = len(contexts) + sum(c[1] for c in chunks)
    ids = torch.randint(0, 260, (n,), generator=torch.Generator().manual_seed(8))
    starts, num_tokens = contexts + [c[0] for c in chunks], [1] * len(contexts) + [c[1] for c in chunks]
    out = _by_prefill_attention(model, lambda: tuple(t.clone() for t in history), ids, table, starts, num_tokens,
                                len(contexts))
    torch.testing.assert_close(out["paged"], out["sdpa"], atol=2e-5, rtol=1e-4)
    assert not torch.equal(out["paged"], out["paged"].roll(1, 0))  # rows differ: a mix-up would show


@pytest.mark.parametrize("qk_scale", [30, 60])
@torch.inference_mode()
def test_paged_prefill_attention_rescales_when_later_keys_score_far_higher(qk_scale):
    """The paged kernel keeps a running max per row and moves it only when a later step scores more
    than its slack above it. Query and key weights scaled up make scores span hundreds (log2 units)
    along a 300-token prompt, so later steps must move the max and rescale what is summed: at 30,
    skipping the accumulators' rescale is off by ~4; at 60, never moving the max overflows to NaN.
    Scores in the thousands carry ~1e-4 of float32 rounding, hence the wider tolerance."""
    cfg = dataclasses.replace(MICRO, dtype="float32")
    model = TinyGPT.from_seed(cfg, seed=4)
    qk_columns = (cfg.num_heads + cfg.num_kv_heads) * cfg.head_dim
    for block in model.blocks:
        block.attn.wqkv[:, :qk_columns] *= qk_scale
    n = 300
    ids = torch.randint(0, 260, (n,), generator=torch.Generator().manual_seed(8))
    out = _by_prefill_attention(model, lambda: kv_layout.blocked_pool(cfg.num_layers, 256, BLOCK, cfg.num_kv_heads,
                                                                      cfg.head_dim),
                                ids, _tables(1, 60), [0], [n], 0)
    torch.testing.assert_close(out["paged"], out["sdpa"], atol=1e-3, rtol=1e-4)


def test_onednn_rows_are_bounded_buckets():
    """oneDNN caches a primitive per row count: rows are padded to few buckets, at little extra work."""
    rows = native.load_extension().onednn_rows
    assert [rows(r) for r in (1, 7, 32)] == [1, 7, 32]  # small batches (decodes) run exact
    padded = {r: rows(r) for r in range(1, 8193)}
    assert all(r <= b <= r * 17 / 16 for r, b in padded.items())  # at most 1/16 extra rows
    assert all(rows(b) == b for b in padded.values())  # a bucket is its own bucket
    assert len(set(padded.values())) == 32 + 16 * 8  # exact to 32, then 16 per octave to 8192


def test_runner_reports_its_path(caplog):
    f32 = dataclasses.replace(MICRO, dtype="float32")
    for library in ("mkl", "onednn", "panels"):  # the GEMM library is part of the path's name (and so of a fingerprint)
        runner = ModelRunner(f32, EngineConfig(num_blocks=8, linear_library=library))
        assert runner.forward_path == f"fused (linear {library})"
        assert runner.fused.linear_plan == LinearPlan.single(library)
    assert ModelRunner(f32, EngineConfig(num_blocks=8)).forward_path.startswith("fused (linear ")
    sdpa = ModelRunner(f32, EngineConfig(num_blocks=8, linear_library="mkl", prefill_attention="sdpa"))
    assert sdpa.forward_path == "fused (linear mkl; prefill attention sdpa)"  # not the default: named
    assert ModelRunner(f32, EngineConfig(num_blocks=8, compile=False)).forward_path == "eager"
    assert ModelRunner(MICRO, EngineConfig(num_blocks=8)).forward_path.startswith("eager (the fused forward is float32")
    naive = dataclasses.replace(f32, attention="naive")
    assert ModelRunner(naive, EngineConfig(num_blocks=8)).forward_path.startswith("eager (model.attention=naive")


def test_a_failed_build_falls_back_to_eager_with_a_warning(monkeypatch, caplog):
    def broken():
        raise native.NativeUnavailable("building the fused forward failed: g++: not found")

    monkeypatch.setattr(native, "load_extension", broken)
    with caplog.at_level(logging.WARNING):
        runner = ModelRunner(dataclasses.replace(MICRO, dtype="float32"), EngineConfig(num_blocks=8))
    assert runner.forward_path == "eager (building the fused forward failed: g++: not found)"
    assert "running eager" in caplog.text
