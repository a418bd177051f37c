"""The KV link between a prefill and a decode instance: seconds = bytes / bandwidth + latency, bytes =
the sequence's cached tokens x model/sizes.kv_bytes_per_token (2 x layers x KV heads x head_dim x
dtype bytes). Presets with their spec sources: conf/link/."""
from __future__ import annotations

from dataclasses import dataclass

from chunklab.config import LinkConfig, ModelConfig
from chunklab.model.sizes import kv_bytes_per_token


@dataclass(frozen=True)
class LinkModel:
    bytes_per_token: int
    bandwidth_bytes_per_s: float
    latency_s: float

    @classmethod
    def of(cls, link: LinkConfig, model: ModelConfig) -> "LinkModel":
        return cls(kv_bytes_per_token(model), link.bandwidth_gb_per_s * 1e9, link.latency_s)

    def bytes(self, num_tokens: int) -> int:
        return self.bytes_per_token * num_tokens

    def seconds(self, num_tokens: int) -> float:
        """One transfer of num_tokens tokens' K and V."""
        return self.bytes(num_tokens) / self.bandwidth_bytes_per_s + self.latency_s
