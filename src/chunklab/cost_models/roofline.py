"""The spec-sheet cost model: a step's seconds from the work of its forward pass and a device's
peak FLOP/s and memory bandwidth, at the efficiencies its hardware preset states.

One forward pass a step (engine.mixed_batch=true, as vLLM and Sarathi-Serve batch), m rows:
  linear layers  per GEMM (K x N weights): max(2 m K N / (peak eff(m)), K N bytes / (bw weight_bandwidth)),
                 eff(m) = gemm_max m / (m + gemm_half_rows): the weights are read at least once a pass
  LM head        the same GEMM on the s rows that sample
  elementwise    RMSNorms, RoPE, SwiGLU, residual adds: bytes moved / (bw elementwise_bandwidth),
                 at least kernel_floor_s a kernel
  attention      prefill: 4 heads head_dim query-key pairs / (peak attention_prefill) a layer;
                 decode rows and chunks after a cached prefix: K/V bytes read / (bw attention_decode_bandwidth)
  per step       step_overhead_s
Plain Python, no torch. The formulas are shared with the fits (chunklab/cost_models/fits/) that set the
efficiencies from measurements, so what is fit is what predicts.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from chunklab.config import ConfigError, EngineConfig, HardwareConfig, ModelConfig, RooflineEfficiency
from chunklab.cost_models.base import COST_MODELS, Provenance
from chunklab.cost_models.step_shape import FEATURES, StepShape
from chunklab.model.sizes import DTYPE_BYTES, kv_bytes_per_token

_TOKENS, _SAMPLED, _CAUSAL, _CACHED_PAIRS, _DECODE_CTX, _CACHED_CTX = (
    FEATURES.index(name) for name in ("tokens", "sampled_rows", "causal_pairs", "cached_pairs", "decode_ctx", "cached_ctx"))


@dataclass(frozen=True)
class Gemm:
    name: str
    k: int  # input features
    n: int  # output features


def layer_gemms(m: ModelConfig) -> tuple[Gemm, ...]:
    """A Llama layer's linear layers, fused as vLLM runs them."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    return (Gemm("attn_pre_proj", m.d_model, q + 2 * kv), Gemm("attn_post_proj", q, m.d_model),
            Gemm("mlp_up_proj", m.d_model, 2 * m.mlp_hidden), Gemm("mlp_down_proj", m.mlp_hidden, m.d_model))


def layer_elementwise(m: ModelConfig) -> tuple[tuple[str, int], ...]:
    """A layer's elementwise kernels and the elements each moves per token (read + written)."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    return (("input_layernorm", 2 * m.d_model), ("attn_rope", 2 * (q + kv)),
            ("post_attention_layernorm", 2 * m.d_model), ("mlp_act", 3 * m.mlp_hidden),
            ("add", 3 * m.d_model), ("add", 3 * m.d_model))


def gemm_s(rows: float, k: int, n: int, peak_flops: float, bw: float, e: RooflineEfficiency,
           dtype_bytes: int) -> float:
    if rows <= 0:
        return 0.0
    compute = 2.0 * k * n * (rows + e.gemm_half_rows) / (peak_flops * e.gemm_max)  # = 2 m K N / (peak eff(m))
    weights = k * n * dtype_bytes / (bw * e.weight_bandwidth)
    return max(compute, weights)


def elementwise_s(rows: float, elements: int, bw: float, e: RooflineEfficiency, dtype_bytes: int) -> float:
    if rows <= 0:
        return 0.0
    return max(e.kernel_floor_s, rows * elements * dtype_bytes / (bw * e.elementwise_bandwidth))


class RooflineCostModel:
    """Prices a mixed step with the module's formulas. Per-pass constants are folded once at
    construction: a production-scale trace is ~10^5-10^6 steps, each predicted in a few microseconds."""

    def __init__(self, model: ModelConfig, hardware: HardwareConfig, digest: str):
        self.model, self.hardware = model, hardware
        self.provenance = roofline_provenance(hardware, digest)
        e, b = hardware.efficiency, DTYPE_BYTES[model.dtype]
        peak, bw = hardware.peak_dense_tflops[model.dtype] * 1e12, hardware.memory_bandwidth_gb_per_s * 1e9
        layers = model.num_layers
        # a GEMM costs max(per_row_s * (rows + half_rows), weights_s)
        self._gemms = [(layers * 2.0 * g.k * g.n / (peak * e.gemm_max), layers * g.k * g.n * b / (bw * e.weight_bandwidth))
                       for g in layer_gemms(model)]
        self._head = (2.0 * model.d_model * model.vocab_size / (peak * e.gemm_max),
                      model.d_model * model.vocab_size * b / (bw * e.weight_bandwidth))
        self._half_rows = e.gemm_half_rows
        self._elementwise = [layers * n * b / (bw * e.elementwise_bandwidth) for _, n in layer_elementwise(model)]
        self._kernel_floor_s = layers * e.kernel_floor_s
        self._pair_s = layers * 4.0 * model.num_heads * model.head_dim / (peak * e.attention_prefill)
        self._kv_token_s = kv_bytes_per_token(model) / (bw * e.attention_decode_bandwidth)  # exact: an integer
        self._step_s = e.step_overhead_s

    @classmethod
    def from_config(cls, model: ModelConfig, engine: EngineConfig, hardware: HardwareConfig,
                    required: bool = True) -> tuple["RooflineCostModel", str]:
        """The roofline of the run's hardware preset (a spec sheet always applies: never None)."""
        if not engine.mixed_batch:
            raise ConfigError("engine.mixed_batch=False: the roofline cost model prices one forward pass a step "
                              f"(hardware={hardware.name}); use engine.mixed_batch=true")
        # the scale is a wrapper with its own digest (cost_models/scaled.py), not the roofline's
        spec = {k: v for k, v in asdict(hardware).items() if k != "step_time_scale"}
        doc = {"model": asdict(model), "hardware": spec}
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]
        return cls(model, hardware, digest), ""

    def predict(self, shape: StepShape) -> float:
        return self.predict_features(shape.features())

    def predict_features(self, features: list[float]) -> float:
        """Seconds of a mixed step with these FEATURES (one forward pass; see the module's formulas)."""
        return self.pass_s(features[_TOKENS], features[_SAMPLED],
                           features[_CAUSAL] + features[_CACHED_PAIRS], features[_DECODE_CTX] + features[_CACHED_CTX]) \
            + self._step_s

    def pass_s(self, rows: float, sampled_rows: float, query_key_pairs: float, kv_tokens_read: float) -> float:
        """One forward pass over `rows` rows; equal to summing gemm_s and elementwise_s per layer. Runs every
        simulated step: `b if b > a else a` is max(a, b) (the same float, added in the same order) without
        the builtin's call."""
        t = self._pair_s * query_key_pairs + self._kv_token_s * kv_tokens_read
        if rows > 0:
            scaled = rows + self._half_rows
            for per_row_s, weights_s in self._gemms:
                compute_s = per_row_s * scaled
                t += weights_s if weights_s > compute_s else compute_s
            floor_s = self._kernel_floor_s
            for per_token_s in self._elementwise:
                moved_s = per_token_s * rows
                t += moved_s if moved_s > floor_s else floor_s
        if sampled_rows > 0:
            per_row_s, weights_s = self._head
            compute_s = per_row_s * (sampled_rows + self._half_rows)
            t += weights_s if weights_s > compute_s else compute_s
        return t


def roofline_provenance(h: HardwareConfig, digest: str) -> Provenance:
    phrase = (f"the roofline cost model {digest} of {h.description} ({h.spec_source}; "
              f"efficiencies: {h.efficiency.source})")
    tags = {"cost_model": "roofline", "roofline.digest": digest, "roofline.hardware": h.name,
            "roofline.spec_source": h.spec_source, "roofline.efficiency_source": h.efficiency.source}
    conditions = {"device": f"simulated ({h.description})", "torch_version": "n/a (no torch)",
                  "torch_build": "n/a", "torch_threads": "n/a", "cost_model": phrase}
    return Provenance(digest, tags, conditions, phrase)


COST_MODELS.add("roofline", RooflineCostModel.from_config)
