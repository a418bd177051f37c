"""Attention over a paged KV pool for a flat, mixed batch of tokens.

A step's tokens are laid out as [decode tokens..., prefill chunk 1..., chunk 2...].
Decodes are attended in one batched SDPA call (context padded, masked); each
prefill chunk is one SDPA call against its sequence's cached prefix plus itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

ATTENTION_IMPLS = ("sdpa", "naive")


@dataclass
class PrefillSegment:
    """One prefill chunk: batch rows [start, end) at positions [context_len - n, context_len)."""
    start: int
    end: int
    context_len: int
    # slots of positions [0, context_len) in the pool; None when the chunk is the
    # whole context (first chunk), so the fresh K/V can be used without a gather.
    context_slots: torch.Tensor | None
    # [n, context_len] bool, built once per step for all layers; None with context_slots
    mask: torch.Tensor | None = None

    @classmethod
    def build(cls, start: int, end: int, context_len: int, context_slots: torch.Tensor | None):
        mask = None if context_slots is None else lower_right_mask(end - start, context_len, context_slots.device)
        return cls(start, end, context_len, context_slots, mask)


@dataclass
class DecodeBatch:
    """Decode rows [0, num_decodes) of the batch, one token each."""
    num_decodes: int
    context_slots: torch.Tensor  # [B, max_ctx] slot ids (padding points at slot 0)
    valid_mask: torch.Tensor  # [B, 1, 1, max_ctx] bool, True where a position is real


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] where each token's K/V is written
    decode: DecodeBatch | None = None
    prefills: list[PrefillSegment] = field(default_factory=list)
    impl: str = "sdpa"


def paged_attention(q, k, v, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
    # q: [T, H, D]; k, v: [T, Hkv, D] (this step's, already written to the cache)
    # k_cache, v_cache: [num_slots, Hkv, D]
    out = torch.empty_like(q)
    attend = _sdpa if meta.impl == "sdpa" else _naive
    if meta.decode is not None:
        dec = meta.decode
        n = dec.num_decodes
        kd = k_cache[dec.context_slots].transpose(1, 2)  # [B, Hkv, max_ctx, D]
        vd = v_cache[dec.context_slots].transpose(1, 2)
        qd = q[:n].unsqueeze(2)  # [B, H, 1, D]
        out[:n] = attend(qd, kd, vd, dec.valid_mask, causal=False).squeeze(2)
    for seg in meta.prefills:
        qs = q[seg.start:seg.end].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if seg.context_slots is None:
            ks, vs = k[seg.start:seg.end], v[seg.start:seg.end]
        else:
            ks, vs = k_cache[seg.context_slots], v_cache[seg.context_slots]
        ks = ks.transpose(0, 1).unsqueeze(0)  # [1, Hkv, ctx, D]
        vs = vs.transpose(0, 1).unsqueeze(0)
        out[seg.start:seg.end] = attend(qs, ks, vs, seg.mask, causal=seg.mask is None)[0].transpose(0, 1)
    return out


def lower_right_mask(num_queries: int, context_len: int, device) -> torch.Tensor:
    # query i sits at position context_len - num_queries + i and sees keys <= that.
    return torch.ones(num_queries, context_len, dtype=torch.bool, device=device).tril(context_len - num_queries)


def _sdpa(q, k, v, mask, causal: bool):
    # Native GQA: K/V keep their Hkv heads; no per-query-head copies.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)


def _naive(q, k, v, mask, causal: bool):
    """Textbook attention with a materialised [.., n, ctx] score matrix (ablation only)."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # [B, H, n, ctx]
    if causal:
        n, ctx = scores.shape[-2:]
        mask = lower_right_mask(n, ctx, q.device)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v
