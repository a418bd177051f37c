"""The measured cluster's KV link: a prefill instance's KV pool lives in a POSIX shared-memory segment
(multiprocessing.shared_memory), and a decode instance copies a handed-off sequence's blocks out of it
(read_blocks: the transfer), then into its own pool when its scheduler admits the sequence
(write_blocks). The prefill side frees the blocks once the copy is done (Scheduler.release_sent).

Both pool layouts (model/kv_layout.py) are handled: blocked, [L, Hkv, blocks, ...], blocks on dim 2;
slot-major, [L, slots, Hkv, D], viewed as [L, blocks, block_size, Hkv, D], blocks on dim 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from multiprocessing import shared_memory

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class PoolHandle:
    """What another process needs to attach to a shared pool (picklable)."""
    shm_name: str
    shapes: tuple[tuple[int, ...], ...]  # K's, then V's
    dtype: str
    block_size: int


def _views(shm: shared_memory.SharedMemory, handle: PoolHandle) -> tuple[torch.Tensor, ...]:
    dtype, out, offset = DTYPES[handle.dtype], [], 0
    for shape in handle.shapes:
        count = 1
        for n in shape:
            count *= n
        out.append(torch.frombuffer(shm.buf, dtype=dtype, count=count, offset=offset).view(shape))
        offset += count * out[-1].element_size()
    return tuple(out)


def share_pool(kv: tuple[torch.Tensor, ...], block_size: int, shm_name: str | None = None):
    """A new segment (named shm_name; None: a name of Python's) holding a copy of the pool kv: (the
    segment, keep it open while the tensors live; the pool's tensors over it; the handle other processes
    attach with). The caller unlinks it when done (a measured cluster: by name, topology/remote.py)."""
    dtype = next(k for k, v in DTYPES.items() if v == kv[0].dtype)
    handle_shapes = tuple(tuple(t.shape) for t in kv)
    nbytes = sum(t.numel() * t.element_size() for t in kv)
    shm = shared_memory.SharedMemory(name=shm_name, create=True, size=nbytes)
    handle = PoolHandle(shm.name, handle_shapes, dtype, block_size)
    tensors = _views(shm, handle)
    for dst, src in zip(tensors, kv):
        dst.copy_(src)
    return shm, tensors, handle


def attach(handle: PoolHandle):
    """(the segment, the pool's tensors over it) in this process."""
    shm = shared_memory.SharedMemory(name=handle.shm_name)
    return shm, _views(shm, handle)


def _blocks(t: torch.Tensor, block_size: int) -> tuple[torch.Tensor, int]:
    if t.dim() == 5:  # blocked
        return t, 2
    L, slots, h, d = t.shape  # slot-major
    return t.view(L, slots // block_size, block_size, h, d), 1


def read_blocks(pool: tuple[torch.Tensor, ...], block_ids: list[int], block_size: int) -> tuple[torch.Tensor, ...]:
    """A copy of the blocks' K and V (the transfer out of the sender's memory)."""
    idx = torch.tensor(block_ids, dtype=torch.int64)
    out = []
    for t in pool:
        view, dim = _blocks(t, block_size)
        out.append(view.index_select(dim, idx))
    return tuple(out)


def write_blocks(pool: tuple[torch.Tensor, ...], block_ids: list[int], staged: tuple[torch.Tensor, ...],
                 block_size: int) -> None:
    """Copies staged blocks (read_blocks') into the pool at block_ids (as many as both have)."""
    n = min(len(block_ids), staged[0].shape[_blocks(pool[0], block_size)[1]])
    idx = torch.tensor(block_ids[:n], dtype=torch.int64)
    for t, s in zip(pool, staged):
        view, dim = _blocks(t, block_size)
        view.index_copy_(dim, idx, s.narrow(dim, 0, n))
