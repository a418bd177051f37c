"""TinyGPT's sizes by arithmetic, without building it (a simulated run imports no torch)."""
from __future__ import annotations

from chunklab.config import EngineConfig, ModelConfig

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2}


def num_parameters(m: ModelConfig) -> int:
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    attention = m.d_model * (q + 2 * kv) + q * m.d_model
    mlp = 3 * m.d_model * m.mlp_hidden
    per_layer = attention + mlp + 2 * m.d_model  # two RMSNorm weights
    return m.vocab_size * m.d_model * 2 + m.num_layers * per_layer + m.d_model  # embed, LM head, final norm


def kv_bytes_per_token(m: ModelConfig) -> int:
    """K and V of one token in every layer: 2 x layers x KV heads x head_dim x dtype bytes."""
    return 2 * m.num_layers * m.num_kv_heads * m.head_dim * DTYPE_BYTES[m.dtype]


def kv_cache_bytes(m: ModelConfig, e: EngineConfig) -> int:
    return kv_bytes_per_token(m) * e.num_blocks * e.block_size
