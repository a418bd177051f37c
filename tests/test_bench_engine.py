"""The engine micro-benchmark's chunking-by-threads diagnostic (chunklab/stages/bench_engine.py)."""
import torch

from chunklab.config import EngineConfig
from chunklab.stages import bench_engine
from helpers import MICRO


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


def test_where_prefill_time_goes_splits_each_pass_into_linear_layers_and_the_rest(monkeypatch):
    # one pass: 1.0 s, of which linear 0.6 s; 4 chunks of 32: 1.3 s, linear 0.2 s a chunk (0.8 s in all)
    monkeypatch.setattr(bench_engine.bench, "prefill_split",
                        lambda m, configs, n, repeats, cfg: {("paged", 128): [1.0, 1.0, 5.0], ("paged", 32): [1.3]})
    monkeypatch.setattr(bench_engine, "linear_layers_s",
                        lambda m, cfg, rows, repeats: (0.6, "mkl") if rows == 128 else (0.2, "panels"))
    one, chunked = bench_engine.where_prefill_time_goes(MICRO, EngineConfig(compile=False), 128, 32, 3,
                                                        peak_gflops=1.0)
    assert (one["split"], one["library"], chunked["split"], chunked["library"]) == ("1x128", "mkl", "4x32", "panels")
    assert abs(one["total_ms"] - 1000) < 1e-9 and abs(one["rest_ms"] - 400) < 1e-9  # the median, not the mean
    assert abs(chunked["linear_ms"] - 800) < 1e-9 and abs(chunked["rest_ms"] - 500) < 1e-9
    # the same linear FLOPs over both splits: their rates are in the ratio of the linear times
    assert abs(one["linear_gflops"] / chunked["linear_gflops"] - 0.8 / 0.6) < 1e-9
    assert abs(one["of_peak"] / chunked["of_peak"] - 1.3) < 1e-9


def test_linear_layers_time_the_model_s_own_layers_through_the_forced_library():
    seconds, library = bench_engine.linear_layers_s(MICRO, EngineConfig(compile=False), 16, 2)
    assert library == "mkl" and seconds > 0
