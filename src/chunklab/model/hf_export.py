"""The same weights as a Hugging Face LlamaForCausalLM: the test oracle and the
benchmark peer. transformers is a dev dependency, imported only here."""
from __future__ import annotations

import torch

from chunklab.model.tiny_gpt import TinyGPT


def to_llama(model: TinyGPT, attn_implementation: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    c = model.cfg
    config = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.mlp_hidden,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim, max_position_embeddings=c.max_seq_len, rms_norm_eps=c.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )
    config._attn_implementation = attn_implementation
    dtype = next(model.parameters()).dtype
    llama = LlamaForCausalLM(config).to(dtype).eval()
    missing, unexpected = llama.load_state_dict(llama_state_dict(model), strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return llama


def llama_state_dict(model: TinyGPT) -> dict[str, torch.Tensor]:
    c = model.cfg
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    sd = {
        "model.embed_tokens.weight": model.embed.weight,
        "model.norm.weight": model.final_norm,
        "lm_head.weight": model.lm_head.t(),
    }
    for i, b in enumerate(model.blocks):
        p = f"model.layers.{i}."
        # ours are stored [in, out]; Hugging Face's are [out, in]
        wq, wk, wv = b.attn.wqkv.t().split([q, kv, kv], dim=0)
        gate, up = b.mlp.w_gate_up.t().split(c.mlp_hidden, dim=0)
        sd.update({
            p + "self_attn.q_proj.weight": wq, p + "self_attn.k_proj.weight": wk,
            p + "self_attn.v_proj.weight": wv, p + "self_attn.o_proj.weight": b.attn.wo.t(),
            p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
            p + "mlp.down_proj.weight": b.mlp.w_down.t(),
            p + "input_layernorm.weight": b.attn_norm, p + "post_attention_layernorm.weight": b.mlp_norm,
        })
    return {k: v.detach().contiguous().clone() for k, v in sd.items()}
