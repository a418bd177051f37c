"""Attention over a paged KV pool for a flat, mixed batch of tokens.

A step's tokens are laid out as [decode tokens..., prefill chunk 1..., chunk 2...].
Decodes are attended in one batched SDPA call (context padded, masked); each
prefill chunk is one SDPA call against its sequence's cached prefix plus itself.
Masks are additive (0 / -inf) in the model's dtype and built once per step: a
boolean mask would be converted again inside every layer's SDPA call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def lower_right_mask(num_queries: int, context_len: int, device) -> torch.Tensor:
    """Bool [n, ctx]: query i sits at position ctx - n + i and sees keys up to it."""
    return torch.ones(num_queries, context_len, dtype=torch.bool, device=device).tril(context_len - num_queries)


@dataclass
class PrefillSegment:
    """One prefill chunk: batch rows [start, end) at positions [context_len - n, context_len)."""
    start: int
    end: int
    context_len: int
    # slots of positions [0, context_len) in the pool; None when the chunk is the
    # whole context (first chunk), so the fresh K/V are used without a gather.
    context_slots: torch.Tensor | None
    mask: torch.Tensor | None = None  # [n, context_len] additive; None with context_slots

    @classmethod
    def build(cls, start: int, end: int, context_len: int, context_slots: torch.Tensor | None,
              dtype: torch.dtype = torch.float32):
        mask = None
        if context_slots is not None:
            mask = additive_mask(lower_right_mask(end - start, context_len, context_slots.device), dtype)
        return cls(start, end, context_len, context_slots, mask)


@dataclass
class DecodeBatch:
    """Decode rows [0, B) of the batch, one token each."""
    context_slots: torch.Tensor  # [B, max_ctx] slot ids (padding points at slot 0)
    mask: torch.Tensor  # [B, 1, 1, max_ctx] additive: 0 where a position is real, -inf on padding

    @classmethod
    def build(cls, context_slots: torch.Tensor, valid: torch.Tensor, dtype: torch.dtype = torch.float32):
        return cls(context_slots, additive_mask(valid, dtype)[:, None, None, :])


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] where each token's K/V is written
    decode: DecodeBatch | None = None
    prefills: list[PrefillSegment] = field(default_factory=list)
    impl: str = "sdpa"


def paged_attention(q, k, v, k_cache, v_cache, meta: AttentionMetadata) -> torch.Tensor:
    # q: [T, H, D]; k, v: [T, Hkv, D] (this step's, already written to the cache)
    # k_cache, v_cache: [num_slots, Hkv, D]; returns [T, H, D]
    attend = _sdpa if meta.impl == "sdpa" else _naive
    parts = []
    if meta.decode is not None:
        parts.append(_decode(q, k_cache, v_cache, meta.decode, attend))
    for seg in meta.prefills:
        qs = q[seg.start:seg.end].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        if seg.context_slots is None:
            ks, vs = k[seg.start:seg.end], v[seg.start:seg.end]
        else:
            ks, vs = k_cache.index_select(0, seg.context_slots), v_cache.index_select(0, seg.context_slots)
        ks = ks.transpose(0, 1).unsqueeze(0)  # [1, Hkv, ctx, D]
        vs = vs.transpose(0, 1).unsqueeze(0)
        parts.append(attend(qs, ks, vs, seg.mask, causal=seg.mask is None)[0].transpose(0, 1))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _decode(q, k_cache, v_cache, dec: DecodeBatch, attend) -> torch.Tensor:
    B, max_ctx = dec.context_slots.shape
    Hkv, D = k_cache.shape[1:]
    # index_select on a flat index is ~2.5x faster here than advanced indexing
    flat = dec.context_slots.flatten()
    kd = k_cache.index_select(0, flat).view(B, max_ctx, Hkv, D).transpose(1, 2)  # [B, Hkv, max_ctx, D]
    vd = v_cache.index_select(0, flat).view(B, max_ctx, Hkv, D).transpose(1, 2)
    # GQA decode: the G query heads of a KV head become G query rows of it, so each
    # K/V row is read once per KV head (about 2x faster than enable_gqa here).
    qd = q[:B].reshape(B, Hkv, -1, D)  # [B, Hkv, G, D]
    return attend(qd, kd, vd, dec.mask, causal=False).reshape(B, -1, D)


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
        mask = additive_mask(lower_right_mask(n, ctx, q.device), scores.dtype)
    if mask is not None:
        scores = scores + mask
    return scores.softmax(dim=-1) @ v
