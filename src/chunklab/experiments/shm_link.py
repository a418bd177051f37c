"""The measured cluster's KV link, timed: seconds = bytes / bandwidth + latency, fit on transfers of
1..2,048 tokens' KV blocks through shared memory, the way the measured cluster moves them
(topology/transport_shm.py): the sender's pool in a shared segment; a receiver process, on another
core, told the block ids over a multiprocessing queue, copies them out (read_blocks) and into its own
pool (write_blocks), then stamps CLOCK_MONOTONIC (one clock for both processes). One transfer is the
sender's stamp before it sends the ids -> the receiver's after its copies: the message hop, the read
and the write. A measured cluster's transfer_s counts the same two copies (topology/phases.py: its read
when the ids come, its write when the decode instance admits the sequence), so the twins, which price
each transfer with this fit, put the copies in the phase the measured runs do; what a measured
transfer holds beyond the fit is said there.

The fit gives the `shm` link preset (conf/link/shm.yaml), its conditions beside it.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from chunklab.topology.transport_shm import attach, read_blocks, share_pool, write_blocks
from chunklab.config import ModelConfig
from chunklab.model import kv_layout
from chunklab.model.sizes import kv_bytes_per_token

TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class LinkFit:
    bandwidth_gb_per_s: float
    latency_s: float
    r2: float  # of the fit over every transfer timed
    num_transfers: int


def _pool(model: ModelConfig, num_blocks: int, block_size: int):
    return kv_layout.blocked_pool(model.num_layers, num_blocks, block_size, model.num_kv_heads, model.head_dim)


def _receiver(model: ModelConfig, num_blocks: int, block_size: int, handle, core: int, inbox, outbox) -> None:
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    _, source = attach(handle)
    own = _pool(model, num_blocks, block_size)
    outbox.put("ready")
    while (ids := inbox.get()) is not None:
        write_blocks(own, ids, read_blocks(source, ids, block_size), block_size)
        outbox.put(time.monotonic())


def time_transfers(model: ModelConfig, block_size: int = 16, tokens=TOKENS, repeats: int = 7) -> list[dict]:
    """Rows (tokens, bytes, seconds), repeats per size, after one untimed transfer of each size. Each
    repeat takes other blocks of the pool, so no copy reads what the previous one left in cache."""
    cores = sorted(os.sched_getaffinity(0))
    blocks_max = -(-max(tokens) // block_size)
    num_blocks = blocks_max * (repeats + 1)
    segment, pool, handle = share_pool(tuple(torch.randn_like(t) for t in _pool(model, num_blocks, block_size)),
                                       block_size)
    ctx = multiprocessing.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(model, num_blocks, block_size, handle, cores[-1], inbox, outbox),
                       daemon=True)
    proc.start()
    rows = []
    try:
        outbox.get(timeout=120)
        per_token = kv_bytes_per_token(model)
        for n in tokens:
            nb = -(-n // block_size)
            for r in range(repeats + 1):
                ids = list(range(r * blocks_max, r * blocks_max + nb))
                start = time.monotonic()
                inbox.put(ids)
                end = outbox.get(timeout=60)
                if r:  # the first of each size is untimed
                    rows.append({"tokens": n, "bytes": n * per_token, "seconds": end - start})
    finally:
        inbox.put(None)
        proc.join(10)
        if proc.is_alive():
            proc.kill()
        del pool
        segment.close()
        segment.unlink()
    return rows


def fit_link(rows: list[dict]) -> LinkFit:
    """Least squares of seconds on bytes, each transfer's residual relative to its seconds (so the
    small transfers set the latency, the large the bandwidth): slope 1 / bandwidth, intercept latency."""
    x = np.array([r["bytes"] for r in rows], dtype=float)
    y = np.array([r["seconds"] for r in rows], dtype=float)
    slope, intercept = np.polyfit(x, y, 1, w=1 / y)
    resid = y - (slope * x + intercept)
    r2 = 1 - float(resid @ resid) / float(((y - y.mean()) ** 2).sum())
    return LinkFit(float(1 / slope / 1e9), max(0.0, float(intercept)), r2, len(rows))


def link_preset(fit: LinkFit, conditions: str) -> str:
    """conf/link/shm.yaml's text: the fit, and the conditions it was measured under."""
    return (f"# Shared memory between two processes on this machine's cores: the measured cluster's KV link\n"
            f"# (topology/transport_shm.py). Written from timed transfers by experiments/shm_link.py (link_preset),\n"
            f"# not by hand; `dvc repro`'s topologies stage writes its own beside outputs/topologies/shm_link.csv.\n"
            f"# Conditions: {conditions}\n"
            f"name: shm\n"
            f"bandwidth_gb_per_s: {fit.bandwidth_gb_per_s:.4g}\n"
            f"latency_s: {fit.latency_s:.4g}\n"
            f"spec_source: \"measured: {fit.num_transfers} transfers of 1-2048 tokens' KV blocks, least squares "
            f"(relative residuals; r2 {fit.r2:.3f}); {conditions}\"\n"
            f"latency_source: \"measured: the fit's intercept (queue message to the receiving process + its wake-up)\"\n")
