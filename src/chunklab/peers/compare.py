"""Our engine and vLLM on the same work, on this machine, one after the other (never at once).

The work (issue 19): one 1536-token prompt prefilled in one pass, in 6 x 256 and in
24 x 64; a static batch of 8 x 512-token prompts + 64 new tokens; and the ch10 mix
(100 requests at 8/s, seed 3) replayed in real time at budgets 64, 512 and 8192.
Our engine runs it twice, with every linear layer through MKL (before) and with the
probed library per batch size (after); vLLM once, one engine per budget.
"""
from __future__ import annotations

import dataclasses
import statistics
import tempfile
from pathlib import Path

import pandas as pd

from chunklab import bench
from chunklab.app import run_experiment
from chunklab.config import EngineConfig
from chunklab.experiments.compose import compose_run_config
from chunklab.metrics.summary import all_gaps
from chunklab.metrics.records import percentile
from chunklab.peers import vllm_peer
from chunklab.peers.labels import AFTER_LABEL, BEFORE_COLUMN, BEFORE_LABEL
from chunklab.workload import make_requests

# before issue 19: every linear layer through MKL, prefill chunks through ATen's SDPA; after: the
# defaults (this machine's probed GEMM library per batch size, the paged prefill kernel)
VARIANTS = {"before": EngineConfig(linear_library="mkl", prefill_attention="sdpa"), "after": EngineConfig()}
# the labels every table and sentence uses for the two (perf.csv, perf_vs_vllm.csv, the REPORT)


def latency(records) -> dict[str, float]:
    """TTFT p50/p99, every-gap ITL p50/p99 and per-request TPOT p50 (seconds), as our summaries compute them."""
    done = [r for r in records if r.status == "finished"]
    gaps = all_gaps(done)
    return {"ttft_p50_s": percentile([r.ttft_s for r in done], 50), "ttft_p99_s": percentile([r.ttft_s for r in done], 99),
            "itl_p50_s": percentile(gaps, 50), "itl_p99_s": percentile(gaps, 99),
            "tpot_p50_s": percentile([r.tpot_s for r in done if r.tpot_s is not None], 50)}


def median_latency(replays: list[list]) -> dict[str, float]:
    """latency() of each replay's records, then the median over replays of each percentile. A p99 of
    100 requests is the second-worst one; on a 2-core VM one replay's 2nd-worst TTFT moved by 10-30%
    between replays of the same requests (b512: ours 149.0 and 136.2 ms, vLLM's 163.2 and 172.7)."""
    per_replay = [latency(records) for records in replays]
    return {k: statistics.median(r[k] for r in per_replay) for k in per_replay[0]}


def serving_config(p: dict, budget: int, overrides: list[str]):
    return compose_run_config(["workload=ch10_mixed", f"workload.num_requests={p['serve_requests']}",
                               f"workload.rate_per_s={p['rate_per_s']}", f"workload.seed={p['seed']}",
                               f"scheduler.budget={budget}", "engine.clock=wall", "tracking=none",
                               "tracking.progress=false", *overrides])


def offline_samples(p: dict, overrides: list[str], rounds: int) -> dict[str, dict]:
    """`rounds` rounds of the prefill split and the static batch, the variants alternated round by round:
    per variant {"prefill": {chunk: [seconds]}, "static": [tok/s]}."""
    cfg = compose_run_config(overrides)
    m, n = cfg.model, p["prompt_tokens"]
    prompts = bench.static_batch_prompts(p["static_batch"], p["static_prompt_tokens"])
    samples = {v: {"prefill": {c: [] for c in p["prefill_chunks"]}, "static": []} for v in VARIANTS}
    for _ in range(rounds):
        for v, e in VARIANTS.items():
            e = dataclasses.replace(e, threads=cfg.engine.threads)
            configs = [(e.prefill_attention, c) for c in p["prefill_chunks"]]
            for (_, c), ts in bench.prefill_split(m, configs, n, 1, e).items():
                samples[v]["prefill"][c] += ts
            samples[v]["static"].append(bench.engine_batch_tokens_per_s(m, e, prompts, p["static_new_tokens"]))
    return samples


def merged(*parts: dict[str, dict]) -> dict[str, dict]:
    """offline_samples' results pooled (rounds taken before and after the peer's)."""
    out = {v: {"prefill": {c: [] for c in parts[0][v]["prefill"]}, "static": []} for v in parts[0]}
    for part in parts:
        for v, s in part.items():
            for c, ts in s["prefill"].items():
                out[v]["prefill"][c] += ts
            out[v]["static"] += s["static"]
    return out


def ours(p: dict, overrides: list[str], samples: dict[str, dict] | None = None) -> dict[str, dict[str, float]]:
    """Every measurement of our engine, per variant, the variants alternated round by round.
    samples: offline rounds already taken (offline_samples; perf takes half before vLLM's worker
    and half after, so a slow drift of the machine weighs on both engines alike); else p["repeats"] now."""
    n = p["prompt_tokens"]
    samples = samples or offline_samples(p, overrides, p["repeats"])
    out = {v: {} for v in VARIANTS}
    for v in VARIANTS:
        out[v] |= {f"prefill_{-(-n // c)}x{c}_s": statistics.median(ts) for c, ts in samples[v]["prefill"].items()}
        out[v]["static_tokens_per_s"] = statistics.median(samples[v]["static"])
    with tempfile.TemporaryDirectory() as tmp:
        for budget in p["budgets"]:
            replays = {v: [] for v in VARIANTS}
            for i in range(p.get("serve_repeats", 1)):  # the variants alternated replay by replay
                for v, e in VARIANTS.items():
                    lib = [f"engine.linear_library={e.linear_library}", f"engine.prefill_attention={e.prefill_attention}"]
                    run = run_experiment(serving_config(p, budget, overrides + lib), Path(tmp) / f"{v}-{budget}-{i}")
                    replays[v].append(run.records)
            for v in VARIANTS:
                out[v] |= {f"b{budget}_{k}": x for k, x in median_latency(replays[v]).items()}
    return out


def theirs(p: dict, overrides: list[str], threads: int) -> dict[str, float]:
    """vLLM on the same work: one worker process (one engine) per token budget."""
    cfg = compose_run_config(overrides)
    m, n = cfg.model, p["prompt_tokens"]
    prompt = list(bench.static_batch_prompts(1, n)[0])
    prompts = [list(x) for x in bench.static_batch_prompts(p["static_batch"], p["static_prompt_tokens"])]
    # one engine per budget: the serving budgets, each chunk size below the prompt, the static batch's
    budgets = sorted({*p["budgets"], *(c for c in p["prefill_chunks"] if c < n), p["static_budget"]})
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = vllm_peer.export_model(m, Path(tmp) / "tinygpt")
        for budget in budgets:
            chunk = min(budget, n)  # a budget of at least the prompt prefills it in one pass
            tasks = []
            if chunk in p["prefill_chunks"]:
                tasks.append({"kind": "prefill", "prompt": prompt, "repeats": p["repeats"]})
            if budget == p["static_budget"]:
                tasks.append({"kind": "static", "prompts": prompts, "new_tokens": p["static_new_tokens"], "repeats": 3})
            requests = None
            if budget in p["budgets"]:  # the same requests replayed serve_repeats times by one engine
                served = serving_config(p, budget, overrides)
                requests, _ = make_requests(served.workload, served.model)
                tasks += [vllm_peer.serve_task(requests)] * p.get("serve_repeats", 1)
            spec = {"model_dir": str(model_dir), "budget_tokens": budget, "max_num_seqs": cfg.scheduler.max_num_seqs,
                    "max_model_len": m.max_seq_len, "tasks": tasks}
            done = vllm_peer.run_worker(spec, threads)
            out["vllm_version"] = done["vllm_version"]
            replays = []
            for task, result in zip(tasks, done["results"]):
                if task["kind"] == "prefill":
                    out[f"prefill_{-(-n // chunk)}x{chunk}_s"] = statistics.median(result["seconds"])
                elif task["kind"] == "static":
                    out["static_tokens_per_s"] = statistics.median(result["tokens_per_s"])
                else:
                    replays.append(vllm_peer.serve_records(result, requests))
            if replays:
                out |= {f"b{budget}_{k}": x for k, x in median_latency(replays).items()}
    return out


COLUMNS = ["measurement", "unit", BEFORE_COLUMN, "chunklab after", "vLLM", "after / vLLM", "at least as good as vLLM"]


def table(ours_: dict[str, dict[str, float]] | None, vllm: dict[str, float] | None) -> pd.DataFrame:
    """One row per measurement: before, after, vLLM, after / vLLM, and whether after is at least as good.
    ours_ None (nothing compared): no rows, the same columns."""
    rows = []
    for key, after in (ours_ or {"after": {}})["after"].items():
        higher_better = key.endswith("tokens_per_s")
        scale, unit = (1.0, "tok/s") if higher_better else (1e3, "ms")
        peer = None if vllm is None else vllm.get(key)
        ratio = None if peer is None else after / peer
        ok = "" if ratio is None else ("yes" if (ratio >= 1 if higher_better else ratio <= 1) else "no")
        rows.append({"measurement": key.removesuffix("_s").removesuffix("_tokens_per_s") if not higher_better else key,
                     "unit": unit, BEFORE_COLUMN: scale * ours_["before"][key], "chunklab after": scale * after,
                     "vLLM": None if peer is None else scale * peer, "after / vLLM": ratio,
                     "at least as good as vLLM": ok})
    return pd.DataFrame(rows, columns=COLUMNS)
