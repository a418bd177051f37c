"""The fused forward's GEMM libraries and a plan choosing one per batch size (linear_library.py
probes which; native.py runs it). The primitives every caller shares: the layers' shapes and
oneDNN's prepacked weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from chunklab.config import ModelConfig

LIBRARIES = ("mkl", "onednn", "panels")  # the order of fused_forward.cpp's Library enum


@dataclass(frozen=True)
class LinearPlan:
    """Per rung (minimum rows), the library that runs a step of at least that many rows."""
    rungs: tuple[tuple[int, str], ...]  # ascending minimum rows; the first is 1

    @classmethod
    def single(cls, library: str) -> "LinearPlan":
        return cls(((1, library),))

    def library_for(self, rows: int) -> str:
        chosen = self.rungs[0][1]
        for min_rows, library in self.rungs:
            if rows >= min_rows:
                chosen = library
        return chosen

    @property
    def uses(self) -> set[str]:
        return {lib for _, lib in self.rungs}

    def describe(self) -> str:
        """'mkl', 'onednn' or 'mkl<4, onednn>=4': adjacent rungs of one library merged."""
        merged: list[tuple[int, str]] = []
        for min_rows, library in self.rungs:
            if not merged or merged[-1][1] != library:
                merged.append((min_rows, library))
        if len(merged) == 1:
            return merged[0][1]
        parts = []
        for i, (min_rows, library) in enumerate(merged):
            upper = merged[i + 1][0] if i + 1 < len(merged) else None
            if i == 0:
                parts.append(f"{library}<{upper}")
            elif upper is None:
                parts.append(f"{library}>={min_rows}")
            else:
                parts.append(f"{library} {min_rows}-{upper - 1}")
        return ", ".join(parts)


def linear_shapes(m: ModelConfig) -> list[tuple[int, int]]:
    """(in, out) of one layer's linear layers: fused QKV, output, gate-up, down."""
    q, kv = m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    return [(m.d_model, q + 2 * kv), (q, m.d_model), (m.d_model, 2 * m.mlp_hidden), (m.mlp_hidden, m.d_model)]


def pack(weight_in_out: torch.Tensor, rows_hint: int = 1024) -> torch.Tensor:
    """oneDNN's prepacked form of a [in, out] weight (its linear takes [out, in])."""
    return torch.ops.mkldnn._reorder_linear_weight(weight_in_out.t().contiguous(), rows_hint)


def onednn_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
