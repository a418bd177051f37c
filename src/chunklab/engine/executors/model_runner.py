"""Executes a StepPlan: builds the flat batch and its paged-attention metadata,
runs the model, samples. The only engine module that touches tensors.

Two forward paths, same contract: the fused C++ forward (engine.compile=true, the
default; model/native.py) takes block tables and per-sequence starts, the eager
TinyGPT takes per-token slots and an AttentionMetadata built here."""
from __future__ import annotations

import logging
from array import array
from functools import cache

import torch

from chunklab.config import ConfigError, EngineConfig, ModelConfig
from chunklab.engine.malloc_policy import retain_freed_memory
from chunklab.engine.scheduler import ScheduledChunk, StepPlan
from chunklab.engine.sequence import Sequence
from chunklab.model import kv_layout
from chunklab.model.attention import AttentionMetadata, DecodeBatch, PrefillSegment
from chunklab.model.linear_library import resolve
from chunklab.model.native import FusedForward, NativeUnavailable, load_extension
from chunklab.model.sizes import DTYPE_BYTES, kv_cache_bytes, num_parameters
from chunklab.model.tiny_gpt import TinyGPT

log = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@cache
def default_threads() -> int:
    """torch's intra-op threads before anything set them (engine.threads=0 keeps this)."""
    return torch.get_num_threads()


def torch_threads(engine: EngineConfig) -> int:
    return engine.threads if engine.threads > 0 else default_threads()


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("engine.device='cuda': no CUDA device is available here")
    return torch.device(name)


def check_fits_in_memory(model_cfg: ModelConfig, engine_cfg: EngineConfig) -> None:
    """A model whose weights and KV pool exceed this machine's free memory gets one line, not an OOM kill
    (a Llama preset is for simulated runs on a GPU preset's roofline). The weights count at float32 or
    wider: TinyGPT.from_seed initialises them in float32 before casting."""
    weight_bytes = max(DTYPE_BYTES[model_cfg.dtype], DTYPE_BYTES["float32"])
    need = num_parameters(model_cfg) * weight_bytes + kv_cache_bytes(model_cfg, engine_cfg)
    free = available_memory_bytes()
    if engine_cfg.device == "cpu" and free is not None and need > free:
        raise ConfigError(f"model={model_cfg.name}: its weights and KV pool need {need / 2**30:.1f} GiB, this "
                          f"machine has {free / 2**30:.1f} GiB free (simulate it on a GPU preset: engine=simulated "
                          "hardware=h100)")


def available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None  # not Linux: no check


def eager_reason(model_cfg: ModelConfig, engine_cfg: EngineConfig) -> str:
    """Why this config runs the eager path ('' when it asks for the fused forward and may have it)."""
    if not engine_cfg.compile:
        return "engine.compile=false"
    if model_cfg.attention != "sdpa":
        return f"model.attention={model_cfg.attention} is an eager-only ablation"
    if model_cfg.dtype != "float32" or engine_cfg.device != "cpu":
        return f"the fused forward is float32 on CPU; this run is {model_cfg.dtype} on {engine_cfg.device}"
    return ""


def linear_plan(model_cfg: ModelConfig, engine_cfg: EngineConfig):
    """The fused forward's GEMM library per batch size on this machine (probed once, cached)."""
    return resolve(engine_cfg.linear_library, model_cfg, torch_threads(engine_cfg))


def fused_path_name(plan, prefill_attention: str = "paged") -> str:
    """'fused (linear mkl<4, onednn>=4)': the path and its GEMM libraries, as conditions and fingerprints
    name it; a prefill attention other than the default paged kernel is named too."""
    attention = "" if prefill_attention == "paged" else f"; prefill attention {prefill_attention}"
    return f"fused (linear {plan.describe()}{attention})"


def planned_forward_path(model_cfg: ModelConfig, engine_cfg: EngineConfig) -> str:
    """'fused (linear ...)' or 'eager': the path a runner of this config takes on this machine."""
    if eager_reason(model_cfg, engine_cfg):
        return "eager"
    try:
        load_extension()
    except NativeUnavailable:
        return "eager"
    return fused_path_name(linear_plan(model_cfg, engine_cfg), engine_cfg.prefill_attention)


class ModelRunner:
    def __init__(self, model_cfg: ModelConfig, engine_cfg: EngineConfig):
        self.device = resolve_device(engine_cfg.device)
        check_fits_in_memory(model_cfg, engine_cfg)
        self.dtype = DTYPES[model_cfg.dtype]
        torch.set_num_threads(torch_threads(engine_cfg))  # 0: torch's default, even after a 1-thread runner
        retain_freed_memory()  # large steps reuse memory instead of faulting it in (engine/malloc_policy.py)
        self.model = TinyGPT.from_seed(model_cfg, model_cfg.seed, self.dtype, self.device)
        self.attention_impl = model_cfg.attention
        self._model_cfg = model_cfg
        self.temperature = engine_cfg.temperature
        self.sampling_seed = engine_cfg.sampling_seed
        self.block_size = engine_cfg.block_size
        self._block_offsets = torch.arange(self.block_size, device=self.device)
        self.fused, self.forward_path = self._fused_forward(engine_cfg)
        # The KV pools, in the layout of the path that reads them (model/kv_layout.py): the fused
        # forward's blocked one, or the eager model's slot-major one; the same bytes either way.
        cfg = self.model.cfg
        new_pool = kv_layout.slot_major_pool if self.fused is None else kv_layout.blocked_pool
        self.kv_cache = new_pool(cfg.num_layers, engine_cfg.num_blocks, self.block_size, cfg.num_kv_heads,
                                 cfg.head_dim, self.dtype, self.device)

    def _fused_forward(self, engine_cfg: EngineConfig):
        """The fused C++ forward when engine.compile is on and it can run here, else eager ops.
        Returns (forward or None, the path's name as the run's conditions record it)."""
        reason = eager_reason(self._model_cfg, engine_cfg)
        if reason:
            return None, "eager" if not engine_cfg.compile else f"eager ({reason})"
        try:
            plan = linear_plan(self._model_cfg, engine_cfg)
            forward = FusedForward(self.model, self.block_size, plan, engine_cfg.prefill_attention)
            return forward, fused_path_name(plan, engine_cfg.prefill_attention)
        except NativeUnavailable as exc:
            log.warning("engine.compile=true, running eager: %s", exc)
            return None, f"eager ({exc})"

    @property
    def kv_cache_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.kv_cache)

    @torch.inference_mode()
    def run(self, plan: StepPlan, mixed_batch: bool) -> dict[int, int]:
        """Runs the plan's forward pass(es); returns seq_id -> sampled token."""
        if mixed_batch:
            return self._forward(plan.decodes, plan.prefills)
        sampled = self._forward(plan.decodes, []) if plan.decodes else {}
        for chunk in plan.prefills:  # the chapter's engine: one pass per chunk
            sampled.update(self._forward([], [chunk]))
        return sampled

    def _forward(self, decodes: list[Sequence], chunks: list[ScheduledChunk]) -> dict[int, int]:
        # int64 ids in an array, wrapped without a copy: torch.tensor on a list of ints costs
        # ~15-40 us a step here (it infers a dtype element by element), frombuffer ~2 us.
        token_ids = array("q", [s.last_token_id for s in decodes])
        starts = [s.num_computed_tokens for s in decodes]
        # Only rows that sample need the LM head: every decode, and last rows of final chunks.
        rows, owners = list(range(len(decodes))), list(decodes)
        for c in chunks:
            start = c.seq.num_computed_tokens
            token_ids.extend(c.seq.token_slice(start, start + c.num_tokens))
            if c.is_last:
                rows.append(len(token_ids) - 1)
                owners.append(c.seq)
        input_ids = torch.frombuffer(token_ids, dtype=torch.int64).to(self.device)  # token_ids outlives the step
        if self.fused is not None:  # the final norm of the sampling rows only
            hidden = self._fused_hidden(input_ids, decodes, starts, chunks, rows)  # [R, d_model]
        else:
            meta, positions = self._metadata(decodes, starts, chunks)
            hidden = self.model(input_ids, positions, meta, self.kv_cache)  # [T, d_model]
        if not rows:  # a chunk that does not end its prompt: the forward wrote its KV, nothing samples
            return {}
        if self.fused is None:
            hidden = hidden[torch.tensor(rows, device=self.device)]  # [R, d_model]
        logits = self.model.logits(hidden)  # [R, vocab]
        return {s.seq_id: tok for s, tok in zip(owners, self._sample(logits, owners))}

    def _fused_hidden(self, input_ids, decodes, starts, chunks, rows) -> torch.Tensor:
        seqs = decodes + [c.seq for c in chunks]
        max_blocks = max(len(s.block_table) for s in seqs)
        flat = array("i")
        for s in seqs:
            flat.extend(s.block_table)
            flat.extend([0] * (max_blocks - len(s.block_table)))  # padding, never read
        tables = torch.frombuffer(flat, dtype=torch.int32).view(len(seqs), max_blocks)  # [S, max_blocks]
        starts = starts + [c.seq.num_computed_tokens for c in chunks]
        num_tokens = [1] * len(decodes) + [c.num_tokens for c in chunks]
        return self.fused(input_ids, tables, starts, num_tokens, len(decodes), self.kv_cache, rows)

    def _metadata(self, decodes, starts, chunks) -> tuple[AttentionMetadata, torch.Tensor]:
        slot_parts, pos_parts = [], []
        decode = None
        if decodes:
            decode, dec_slots, dec_pos = self._decode_batch(decodes, starts)
            slot_parts.append(dec_slots)
            pos_parts.append(dec_pos)
        segments, row = [], len(decodes)
        for c in chunks:
            start = c.seq.num_computed_tokens
            context_len = start + c.num_tokens
            all_slots = self._sequence_slots(c.seq.block_table)
            positions = torch.arange(start, context_len, device=self.device)
            slot_parts.append(all_slots[start:context_len])
            pos_parts.append(positions)
            context_slots = all_slots[:context_len] if start > 0 else None
            segments.append(PrefillSegment.build(row, row + c.num_tokens, context_len, context_slots, self.dtype))
            row += c.num_tokens
        meta = AttentionMetadata(torch.cat(slot_parts), decode, segments, self.attention_impl)
        return meta, torch.cat(pos_parts)

    def _sequence_slots(self, block_table: list[int]) -> torch.Tensor:
        blocks = torch.tensor(block_table, device=self.device)
        return (blocks[:, None] * self.block_size + self._block_offsets).flatten()  # [num_blocks * bs]

    def _decode_batch(self, decodes, starts) -> tuple[DecodeBatch, torch.Tensor, torch.Tensor]:
        max_blocks = max(len(s.block_table) for s in decodes)
        table = torch.tensor([s.block_table + [0] * (max_blocks - len(s.block_table)) for s in decodes],
                             device=self.device)  # [B, max_blocks]
        slots = (table[:, :, None] * self.block_size + self._block_offsets).flatten(1)  # [B, max_blocks * bs]
        positions = torch.tensor(starts, device=self.device)  # [B]: position of the token being decoded
        max_ctx = max(starts) + 1
        valid = torch.arange(max_ctx, device=self.device)[None, :] <= positions[:, None]  # [B, max_ctx] bool
        new_slots = slots.gather(1, positions[:, None]).squeeze(1)
        batch = DecodeBatch.build(slots[:, :max_ctx], valid, self.dtype)
        return batch, new_slots, positions

    def _sample(self, logits: torch.Tensor, owners: list[Sequence]) -> list[int]:
        if self.temperature == 0:
            return logits.argmax(dim=-1).tolist()
        probs = torch.softmax(logits.float() / self.temperature, dim=-1).cpu()
        tokens = []
        for p, seq in zip(probs, owners):
            # Seeded by (seed, request, token index): the same tokens whatever the batching.
            gen = torch.Generator().manual_seed(hash((self.sampling_seed, seq.seq_id, seq.num_tokens)) & 0xFFFFFFFF)
            tokens.append(int(torch.multinomial(p, 1, generator=gen)))
        return tokens
