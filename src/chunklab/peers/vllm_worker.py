"""Runs vLLM on a work list and writes what it measured: executed by the peer venv's python.

This file imports nothing of chunklab (the peer venv has vLLM and its own pinned
transformers, not our dependencies) and computes no metric: it returns raw seconds
and per-token timestamps, and chunklab scores them with its own metric code
(peers/vllm_peer.py), so both engines' TTFT, ITL and TPOT are computed the same way.

    python vllm_worker.py SPEC.json OUT.json

SPEC: {"model_dir", "budget_tokens", "max_num_seqs", "max_model_len",
       "tasks": [{"kind": "prefill", "prompt": [ids], "repeats": n}
                 | {"kind": "static", "prompts": [[ids]], "new_tokens": n, "repeats": n}
                 | {"kind": "serve", "requests": [{"id", "arrival_s", "prompt", "max_tokens"}]}]}
One engine (AsyncLLM, vLLM's serving engine) per spec: max_num_batched_tokens is the
budget, fixed at construction. Greedy, ignore_eos, prefix caching off, token-id prompts.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time

# This file's folder is sys.path[0]; nothing in it may shadow a package of the peer's venv.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]


def sampling(max_tokens: int):
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(max_tokens=max_tokens, min_tokens=max_tokens, ignore_eos=True, temperature=0.0,
                          detokenize=False, output_kind=RequestOutputKind.DELTA)


async def one_request(engine, request_id: str, prompt: list[int], max_tokens: int, t0: float) -> list[float]:
    """Seconds since t0 at which each output token reached this client (a delta of k tokens: k stamps)."""
    from vllm.inputs import TokensPrompt

    stamps: list[float] = []
    async for out in engine.generate(TokensPrompt(prompt_token_ids=prompt), sampling(max_tokens), request_id):
        now = time.perf_counter() - t0
        stamps += [now] * len(out.outputs[0].token_ids)
    return stamps


async def prefill(engine, task, tag: str) -> dict:
    seconds = []
    for i in range(task["repeats"] + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        await one_request(engine, f"{tag}-p{i}", task["prompt"], 1, t0)
        if i:
            seconds.append(time.perf_counter() - t0)
    return {"kind": "prefill", "prompt_tokens": len(task["prompt"]), "seconds": seconds}


async def static(engine, task, tag: str) -> dict:
    rates = []
    for i in range(task["repeats"] + 1):
        t0 = time.perf_counter()
        await asyncio.gather(*(one_request(engine, f"{tag}-s{i}-{j}", p, task["new_tokens"], t0)
                               for j, p in enumerate(task["prompts"])))
        if i:
            rates.append(len(task["prompts"]) * task["new_tokens"] / (time.perf_counter() - t0))
    return {"kind": "static", "tokens_per_s": rates}


async def serve(engine, task, tag: str) -> dict:
    """Each request submitted at its arrival time (seconds after the replay starts)."""
    t0 = time.perf_counter()

    async def arrive(r):
        await asyncio.sleep(max(0.0, r["arrival_s"] - (time.perf_counter() - t0)))
        submitted = time.perf_counter() - t0
        stamps = await one_request(engine, f"{tag}-r{r['id']}", r["prompt"], r["max_tokens"], t0)
        return {"id": r["id"], "arrival_s": r["arrival_s"], "submitted_s": submitted, "token_times_s": stamps}

    return {"kind": "serve", "requests": await asyncio.gather(*(arrive(r) for r in task["requests"]))}


async def main(spec: dict) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    t0 = time.perf_counter()
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(
        model=spec["model_dir"], skip_tokenizer_init=True, dtype="float32", seed=0,
        max_num_seqs=spec["max_num_seqs"], max_num_batched_tokens=spec["budget_tokens"],
        max_model_len=spec["max_model_len"], enable_prefix_caching=False, enable_chunked_prefill=True,
        disable_log_stats=True))
    startup_s = time.perf_counter() - t0
    run = {"prefill": prefill, "static": static, "serve": serve}
    try:
        results = [await run[t["kind"]](engine, t, f"t{i}") for i, t in enumerate(spec["tasks"])]
    finally:
        engine.shutdown()
    import vllm

    return {"vllm_version": vllm.__version__, "startup_s": startup_s, "results": results}


if __name__ == "__main__":  # vLLM spawns its engine process: nothing may run on import
    spec_path, out_path = sys.argv[1:3]
    out = asyncio.run(main(json.loads(open(spec_path).read())))
    with open(out_path, "w") as f:
        json.dump(out, f)
