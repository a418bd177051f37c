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


ROUNDING_S = 1e-12  # what is left of a transfer after this little is rounding, not KV


@dataclass
class _Transfer:
    source: int
    target: int
    remaining_s: float  # what is left, in seconds at the whole bandwidth (LinkModel.seconds to begin with)
    share: float = 0.0  # of the bandwidth it gets now
    end_s: float = 0.0


class SharedLinks:
    """Transfers in flight over ports of one bandwidth each: every instance has one (a prefill
    instance's out, a decode instance's in), and a transfer gets 1 / the larger number of transfers
    on either of its two ports (each port's bandwidth split evenly among its transfers: two at once
    from one prefill instance each take twice as long). Shares change only when a transfer starts or
    ends; each change returns the transfers whose end moved. The latency is priced as seconds at the
    whole bandwidth, so a transfer alone takes LinkModel.seconds exactly."""

    def __init__(self, link: LinkModel):
        self.link = link
        self._active: dict[int, _Transfer] = {}  # key -> transfer, in start order
        self._updated_s = 0.0

    def start(self, key: int, source: int, target: int, num_tokens: int, now: float) -> list[tuple[int, float]]:
        """A transfer of num_tokens tokens' KV from instance source to target starting at now:
        [(key, end_s)] of every transfer whose end this moved, the new one included."""
        self._drain(now)
        self._active[key] = _Transfer(source, target, self.link.seconds(num_tokens))
        return self._reshare(now)

    def finish(self, key: int, now: float) -> list[tuple[int, float]]:
        """The transfer `key` ended at now (its last end_s): [(key, end_s)] of the others whose end moved."""
        self._drain(now)
        del self._active[key]
        return self._reshare(now)

    @property
    def num_active(self) -> int:
        return len(self._active)

    def _drain(self, now: float) -> None:
        elapsed = now - self._updated_s
        if elapsed > 0:
            for t in self._active.values():
                left = t.remaining_s - t.share * elapsed
                # a transfer due now (rounding leaves it a few ulps): ends now, with the one that ended
                t.remaining_s = left if left > ROUNDING_S else 0.0
        self._updated_s = now

    def _reshare(self, now: float) -> list[tuple[int, float]]:
        per_port: dict[int, int] = {}
        for t in self._active.values():
            per_port[t.source] = per_port.get(t.source, 0) + 1
            per_port[t.target] = per_port.get(t.target, 0) + 1
        moved = []
        for key, t in self._active.items():
            share = 1.0 / max(per_port[t.source], per_port[t.target])
            if share != t.share:
                t.share = share
                t.end_s = now + t.remaining_s / share
                moved.append((key, t.end_s))
        return moved
