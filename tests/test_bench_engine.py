"""The engine micro-benchmark's chunking-by-threads diagnostic (pipelines/bench_engine.py)."""
import sys
from pathlib import Path

import torch

from chunklab.config import EngineConfig
from helpers import MICRO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
import bench_engine  # noqa: E402


def test_chunking_by_threads_pairs_each_round_and_restores_threads(monkeypatch):
    seen = []

    def fake_prefill_split(m, configs, prompt_tokens, repeats, engine_cfg):
        # 4 s of work for the prompt on one thread, half that on two; two threads also pay 0.1 s a chunk.
        # Like a real engine's construction, it sets torch's thread count to engine.threads.
        torch.set_num_threads(engine_cfg.threads)
        out = {}
        for impl, chunk in configs:
            chunks = -(-prompt_tokens // chunk)
            seen.append((engine_cfg.threads, chunks))
            out[(impl, chunk)] = [4.0 / engine_cfg.threads + (0.1 * chunks if engine_cfg.threads > 1 else 0.0)]
        return out

    monkeypatch.setattr(bench_engine.bench, "prefill_split", fake_prefill_split)
    original = torch.get_num_threads()
    torch.set_num_threads(3)  # neither count measured: a missing restore would leave 1 or 2
    try:
        by = bench_engine.chunking_by_threads(MICRO, EngineConfig(compile=False), 128, 32, rounds=3,
                                              thread_counts=(1, 2))
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(original)
    assert by[1] == {"one_s": 4.0, "chunked_s": 4.0, "ratio": 1.0}
    assert abs(by[2]["one_s"] - 2.1) < 1e-9 and abs(by[2]["chunked_s"] - 2.4) < 1e-9
    assert abs(by[2]["ratio"] - 2.4 / 2.1) < 1e-9  # the chunks' overhead shows as a ratio growing with threads
    # 3 rounds (prefill_split warms each up): both thread counts in each and both splits at each (4
    # chunks of 32 and one pass), each order flipped every round
    even = [(2, 4), (2, 1), (1, 4), (1, 1)]
    odd = [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert seen == even + odd + even
