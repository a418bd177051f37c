"""engine.num_blocks=0: the KV pool sized from the device's memory, as vLLM sizes it.

vLLM profiles a forward pass at the largest batch (max_num_batched_tokens) and gives the KV
cache what is left of gpu_memory_utilization x total memory once the weights and that peak of
activations are taken. We do the same by arithmetic: weights are the model's parameters, the
activation peak is one pass of `budget` rows holding its largest live tensors (hidden states,
the fused QKV and gate-up outputs, the activation) plus fp32 logits for max_num_seqs sampled
rows, and `hardware.runtime_reserved_gb` stands for the CUDA context and allocator slack.
Plain Python, no torch.
"""
from __future__ import annotations

from chunklab.config import ConfigError, EngineConfig, HardwareConfig, ModelConfig, SchedulerConfig
from chunklab.model.sizes import DTYPE_BYTES, kv_bytes_per_token, num_parameters


def weight_bytes(model: ModelConfig) -> int:
    return num_parameters(model) * DTYPE_BYTES[model.dtype]


def activation_bytes(model: ModelConfig, scheduler: SchedulerConfig) -> int:
    m, s = model, scheduler
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    per_row = (2 * m.d_model + q + 2 * kv + 3 * m.mlp_hidden) * DTYPE_BYTES[m.dtype]
    return s.budget * per_row + min(s.max_num_seqs, s.budget) * m.vocab_size * 4


def kv_bytes_per_block(model: ModelConfig, engine: EngineConfig) -> int:
    return kv_bytes_per_token(model) * engine.block_size


def pool_blocks(model: ModelConfig, engine: EngineConfig, scheduler: SchedulerConfig, hardware: HardwareConfig) -> int:
    """The KV blocks the hardware's memory holds once the weights and one pass's activations are taken."""
    h = hardware
    usable = h.memory_gb * 1e9 * h.memory_utilization - h.runtime_reserved_gb * 1e9
    left = usable - weight_bytes(model) - activation_bytes(model, scheduler)
    blocks = int(left // kv_bytes_per_block(model, engine))
    if blocks < 1:
        raise ConfigError(
            f"model={model.name}: its weights ({weight_bytes(model) / 1e9:.1f} GB {model.dtype}) and "
            f"activations ({activation_bytes(model, scheduler) / 1e9:.1f} GB at budget {scheduler.budget}) leave no KV "
            f"cache in hardware={h.name}'s {usable / 1e9:.1f} GB usable: it needs tensor parallelism (not supported)")
    return blocks
