"""The two KV pool layouts and conversions between them.

slot-major (the eager model's): k, v [L, num_slots, Hkv, D], slot = block * block_size + offset;
  a token's K/V is one row, written and gathered with index_copy_/index_select.
blocked (the fused forward's, csrc/kernels.h KVBlocks): per KV head and block, K transposed
  and V row by row, so each (head, block) is two contiguous runs that the decode kernel
  scores without horizontal sums; head-major, so one head's blocks allocated in order are
  one stream:
    k [L, Hkv, num_blocks, D, block_size], v [L, Hkv, num_blocks, block_size, D].
"""
from __future__ import annotations

import torch


def slot_major_pool(num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                    dtype=torch.float32, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    shape = (num_layers, num_blocks * block_size, num_kv_heads, head_dim)
    return torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)


def blocked_pool(num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
                 dtype=torch.float32, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    k = torch.zeros((num_layers, num_kv_heads, num_blocks, head_dim, block_size), dtype=dtype, device=device)
    v = torch.zeros((num_layers, num_kv_heads, num_blocks, block_size, head_dim), dtype=dtype, device=device)
    return k, v


def to_blocked(kv: tuple[torch.Tensor, torch.Tensor], block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A slot-major pool's contents in the blocked layout (copies)."""
    k, v = kv
    L, slots, hkv, d = k.shape
    per_block = (L, slots // block_size, block_size, hkv, d)  # [L, blocks, offset, Hkv, D]
    return (k.reshape(per_block).permute(0, 3, 1, 4, 2).contiguous(),
            v.reshape(per_block).permute(0, 3, 1, 2, 4).contiguous())


def to_slot_major(kv: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """A blocked pool's contents in the slot-major layout (copies)."""
    k, v = kv
    L, hkv, blocks, d, bs = k.shape
    return (k.permute(0, 2, 4, 1, 3).reshape(L, blocks * bs, hkv, d),
            v.permute(0, 2, 3, 1, 4).reshape(L, blocks * bs, hkv, d))
