"""TinyGPT: a byte-level, Llama-shaped decoder (RMSNorm, RoPE, GQA, SwiGLU).

The model never owns a KV cache. Each forward gets a flat batch of tokens from
any number of sequences plus an `AttentionMetadata` that says where each
token's K/V goes in the paged pool and which cached positions it may attend to.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from chunklab.config import TinyGPTConfig
from chunklab.model.attention import AttentionMetadata, paged_attention


def rope_tables(cfg: TinyGPTConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin for every position, in the rotate-half layout Llama uses."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
    angles = torch.outer(torch.arange(cfg.max_seq_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)  # [S, D]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [T, H, D]; cos/sin: [T, 1, D]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def weight(in_features: int, out_features: int) -> nn.Parameter:
    """A projection stored [in, out] and applied as x @ W. With nn.Linear's [out, in]
    layout, torch 2.13 on CPU picks a kernel about 2x slower at T=1 and 1.45x at T=64."""
    return nn.Parameter(torch.empty(in_features, out_features))


class Attention(nn.Module):
    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        self.cfg = cfg
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        # One fused projection: one matmul instead of three per layer per step.
        self.wqkv = weight(cfg.d_model, self.q_size + 2 * self.kv_size)
        self.wo = weight(self.q_size, cfg.d_model)

    def forward(self, x, residual, cos, sin, meta: AttentionMetadata, k_cache, v_cache):
        """residual + attention(x). x, residual: [T, d_model]; k_cache/v_cache: [num_slots, Hkv, D]"""
        T = x.shape[0]
        cfg = self.cfg
        qk, v = (x @ self.wqkv).split([self.q_size + self.kv_size, self.kv_size], dim=-1)
        # q and k heads rotated together: one RoPE per layer, not two.
        qk = apply_rope(qk.view(T, cfg.num_heads + cfg.num_kv_heads, cfg.head_dim), cos, sin)
        q, k = qk.split([cfg.num_heads, cfg.num_kv_heads], dim=1)
        v = v.view(T, cfg.num_kv_heads, cfg.head_dim)
        # One indexed copy per tensor per layer writes every token of the step.
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        out = paged_attention(q, k, v, k_cache, v_cache, meta)  # [T, H, D]
        return torch.addmm(residual, out.reshape(T, self.q_size), self.wo)


class MLP(nn.Module):
    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        self.hidden = cfg.mlp_hidden
        self.w_gate_up = weight(cfg.d_model, 2 * cfg.mlp_hidden)
        self.w_down = weight(cfg.mlp_hidden, cfg.d_model)

    def forward(self, x, residual):
        """residual + mlp(x). In place where it is safe: at T=1536, fresh [T, 1024]
        buffers cost more than the arithmetic (measured: 19.8 -> 11.4 ms a layer)."""
        gate, up = (x @ self.w_gate_up).split(self.hidden, dim=-1)
        act = F.silu(gate, inplace=True).mul_(up)
        return torch.addmm(residual, act, self.w_down)


class Block(nn.Module):
    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        self.eps = cfg.norm_eps
        self.attn_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.mlp_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.attn = Attention(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, meta, k_cache, v_cache):
        d = x.shape[-1:]
        x = self.attn(F.rms_norm(x, d, self.attn_norm, self.eps), x, cos, sin, meta, k_cache, v_cache)
        return self.mlp(F.rms_norm(x, d, self.mlp_norm, self.eps), x)


class TinyGPT(nn.Module):
    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.final_norm = nn.Parameter(torch.ones(cfg.d_model))
        self.lm_head = weight(cfg.d_model, cfg.vocab_size)  # untied
        cos, sin = rope_tables(cfg)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @classmethod
    def from_seed(cls, cfg: TinyGPTConfig, seed: int, dtype=torch.float32, device="cpu") -> "TinyGPT":
        """Random weights that depend only on (cfg, seed), not on dtype or device."""
        model = cls(cfg)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if not name.endswith("norm"):  # norms start at ones
                    p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * cfg.init_std)
        return model.to(device=device, dtype=dtype).eval()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids, positions, meta: AttentionMetadata, kv_cache) -> torch.Tensor:
        """Hidden states after the final norm. input_ids, positions: [T]; returns [T, d_model].

        kv_cache is a pair (k, v) of [num_layers, num_slots, Hkv, D] tensors.
        """
        k_pool, v_pool = kv_cache
        x = self.embed(input_ids)
        cos = self.rope_cos[positions].unsqueeze(1).to(x.dtype)  # [T, 1, D]
        sin = self.rope_sin[positions].unsqueeze(1).to(x.dtype)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, meta, k_pool[i], v_pool[i])
        return F.rms_norm(x, x.shape[-1:], self.final_norm, self.cfg.norm_eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.lm_head
