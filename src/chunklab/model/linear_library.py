"""Which fp32 GEMM library the fused forward's linear layers run through, per batch size.

The x86 CPU wheel of torch has two: MKL (ATen's at::mm) and oneDNN (torch's mkldnn
linear, weights prepacked once). Which is faster depends on the CPU and on the
number of rows: on one AMD EPYC VM oneDNN was ~10% faster from 3 to 512 rows and
~1.8x slower at one row; the issue that asked for this saw it 2x faster at 1536
rows on another. A third is the project's own:
panel_linear (csrc/panel_linear.cpp), a register-blocked kernel over weights packed
once into column panels; where a step has few rows (decode, small prefill chunks)
both libraries repack or stream the weight at a fraction of the machine's rate, and
it is ahead (measured on an Intel Xeon VM: ~1.6x MKL at 8 rows, ~1.15x at 64, behind
past ~256). So the choice is measured, not assumed: a short probe (~5 s) times all
three on this model's own linear layers at a ladder of row counts, and the plan
keeps, per rung, the library that won. Walking up the ladder, each rung's incumbent is
the library of the rung below (MKL at the first): a challenger must win by `MARGIN`
(median of ratios of adjacent timings) to take a rung, so noise cannot flip a tie.

Why the rung below and not MKL throughout: on an Intel Xeon VM, panels over MKL at 512
rows read 0.94-0.99 across 15 probes, so with MKL as every rung's incumbent (and a 3%
margin) the plan flipped between panels and MKL (or oneDNN) from one build to the next.
The probe times bare GEMMs; the forward's panel path also folds the RMSNorms, residual
adds and SiLU-mul into its epilogues, and there a 1,536-token prompt in chunks of 512 and
of 1,024 ran in 0.98x its time under the MKL-from-512 plan (one process, alternated, 12
rounds). And served for minutes, steps with MKL at 512-1,023 rows ran 8-10% over a
profile fitted just before, panels within 2% (docs/measured-and-simulated.md). A plan
that holds still at a tie is one the cost model's profile can describe.

The probe runs once per machine, build of the kernels, model shape, thread count and
candidate set; its result is cached under .cache/linear_library/ so every later
process (and the profile fingerprint, which names the plan) sees the same choice.
engine.linear_library=mkl|onednn|panels forces one library at every size.
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from functools import cache
from pathlib import Path

import torch

from chunklab.config import ModelConfig
from chunklab.model.linear_plan import LIBRARIES, LinearPlan, linear_shapes, onednn_linear, pack
from chunklab.model.native import build_directory, build_now, extension_name, load_extension
from chunklab.paths import in_project

# rung r covers steps of r rows up to the next rung; 512 is a budget-512 step's and a row tile's size
# (measured on an AMD EPYC Zen 5 VM: oneDNN ahead of panels by ~2% at 256 rows, ~8% at 512, ~20% at 1024)
PROBE_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
# A challenger takes a rung only when at least 5% faster there than its incumbent. 5%, not less: across
# 16 probes on one Intel Xeon VM, the challenger at 512 and 1,024 rows read 0.94-1.02 of the incumbent,
# and at 3% one probe in 16 still switched at 1,024 rows (oneDNN at 0.97); at 5% none did. Where a
# library is really ahead (oneDNN ~8% at 512 rows and ~20% at 1,024 on an AMD EPYC Zen 5 VM) it clears it.
MARGIN = 0.05


def candidates(rows: int) -> tuple[str, ...]:
    """The libraries the probe times at `rows` rows (every one, at every size); MKL first (the incumbent)."""
    return LIBRARIES


def _layer_seconds(run, xs: list[torch.Tensor], weights: list[torch.Tensor], outs: list[int]) -> float:
    t0 = time.perf_counter()
    for x, w, n in zip(xs, weights, outs):
        run(x, w, n)
    return time.perf_counter() - t0


def probe_ratios(m: ModelConfig, rows: tuple[int, ...] = PROBE_ROWS, repeats: int = 21) -> dict[int, dict[str, float]]:
    """Per row count: per challenger, the median over `repeats` rounds of its time over MKL's for
    one layer's linear layers (every candidate timed back to back in each round, the order
    rotating), and each candidate's median seconds. A ratio of adjacent timings survives what a
    shared VM does to both (swings of 2x in a minute were seen here)."""

    ext = load_extension()
    gen = torch.Generator().manual_seed(0)
    shapes = linear_shapes(m)
    plain = [torch.randn(k, n, generator=gen) for k, n in shapes]
    weights = {"mkl": plain, "onednn": [pack(w) for w in plain], "panels": [ext.pack_panels(w) for w in plain]}
    run = {"mkl": lambda x, w, n: torch.mm(x, w), "onednn": lambda x, w, n: onednn_linear(x, w),
           "panels": ext.panel_linear}
    outs = [n for _, n in shapes]
    out: dict[int, dict[str, float]] = {}
    with torch.inference_mode():
        for r in rows:
            libs = candidates(r)
            xs = [torch.randn(r, k, generator=gen) for k, _ in shapes]
            rounds = []
            for i in range(repeats + 2):
                order = libs[i % len(libs):] + libs[:i % len(libs)]
                t = {lib: _layer_seconds(run[lib], xs, weights[lib], outs) for lib in order}
                if i >= 2:  # two warm-up rounds
                    rounds.append(t)
            out[r] = {**{f"{lib}_over_mkl": statistics.median(t[lib] / t["mkl"] for t in rounds) for lib in libs[1:]},
                      **{f"{lib}_s": statistics.median(t[lib] for t in rounds) for lib in libs}}
    return out


def plan_from_ratios(ratios: dict[int, dict[str, float]], margin: float | None = None) -> LinearPlan:
    """Per rung, ascending: the incumbent (the rung below's library; MKL at the first) unless the
    fastest library there ran under (1 - margin) of the incumbent's time (margin: MARGIN unless given)."""
    margin = MARGIN if margin is None else margin
    rungs = []
    incumbent = "mkl"
    for r, t in sorted(ratios.items()):
        over_mkl = {"mkl": 1.0} | {key.removesuffix("_over_mkl"): v for key, v in t.items() if key.endswith("_over_mkl")}
        best = min(over_mkl, key=over_mkl.get)
        if over_mkl[best] < (1 - margin) * over_mkl.get(incumbent, 1.0):
            incumbent = best
        rungs.append((r, incumbent))
    rungs[0] = (1, rungs[0][1])  # the lowest rung covers every smaller batch
    return LinearPlan(tuple(rungs))


def _cache_path(m: ModelConfig, threads: int) -> Path:
    # the per-CPU tag and the source digest of the fused build: a changed kernel is probed again
    shape = "x".join(f"{k}-{n}" for k, n in linear_shapes(m))
    root = in_project(os.environ.get("CHUNKLAB_LINEAR_CACHE", Path(".cache") / "linear_library"))
    build = f"{build_directory().name}-{extension_name().removeprefix('chunklab_fused_')}"
    # and the rungs: a probe on another ladder is probed again (the margin is not in the key: the
    # cache holds the timings, and the plan is derived from them on every read)
    ladder = hashlib.sha1(repr(PROBE_ROWS).encode()).hexdigest()[:8]
    return root / f"{build}-t{threads}-{shape}-{'+'.join(LIBRARIES)}-{ladder}.json"


@cache
def probed_plan(m: ModelConfig, threads: int) -> LinearPlan:
    """This machine's plan for this model's shapes at `threads` torch threads: cached, else probed."""
    path = _cache_path(m, threads)
    try:
        return plan_from_ratios({int(r): t for r, t in json.loads(path.read_text())["probe"].items()})
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ratios = probe_ratios(m)
    finally:
        torch.set_num_threads(previous)
    plan = plan_from_ratios(ratios)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another process may probe at once: last rename wins, whole
    tmp.write_text(json.dumps({"rungs": plan.rungs, "plan": plan.describe(), "threads": threads,
                               "probe": {str(r): t for r, t in ratios.items()}}, indent=1))
    tmp.replace(path)
    return plan


def resolve(choice: str, m: ModelConfig, threads: int) -> LinearPlan:
    """The plan for engine.linear_library=`choice` (validated by the config)."""
    return probed_plan(m, threads) if choice == "auto" else LinearPlan.single(choice)


if __name__ == "__main__":  # `python -m chunklab.model.linear_library`: build the fused forward (make setup does), and probe
    if build_now():
        print(f"linear layers on this machine: {probed_plan(ModelConfig(), torch.get_num_threads()).describe()} "
              "(engine.linear_library=auto; probed once, cached in .cache/linear_library/)")
