"""Paged KV block allocator: a free list, reference counts and per-sequence tables.

Plain Python. It hands out block ids; the model runner owns the tensors they index.
"""
from __future__ import annotations

from collections import deque

from chunklab.engine.sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_counts = [0] * num_blocks
        self.free_block_ids: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_block_ids)

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def num_new_blocks(self, seq: Sequence, num_new_tokens: int) -> int:
        needed = self.blocks_for_tokens(seq.num_computed_tokens + num_new_tokens)
        return max(0, needed - len(seq.block_table))

    def fits_own_blocks(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Whether num_new_tokens more tokens of `seq` fit in the blocks it holds (most decode steps)."""
        return seq.num_computed_tokens + num_new_tokens <= len(seq.block_table) * self.block_size

    def max_fitting_tokens(self, seq: Sequence) -> int:
        """How many more tokens of `seq` fit in its own blocks plus all free ones."""
        capacity = (len(seq.block_table) + self.num_free_blocks) * self.block_size
        return capacity - seq.num_computed_tokens

    def can_allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        return self.num_new_blocks(seq, num_new_tokens) <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_new_tokens: int) -> None:
        """Grow seq's block table to hold num_new_tokens more tokens."""
        for _ in range(self.num_new_blocks(seq, num_new_tokens)):
            block_id = self.free_block_ids.popleft()
            assert self.ref_counts[block_id] == 0
            self.ref_counts[block_id] = 1
            seq.block_table.append(block_id)

    def free(self, seq: Sequence) -> None:
        self.free_ids(seq.block_table)
        seq.block_table = []

    def free_ids(self, block_ids: list[int]) -> None:
        # Reverse order: the tail blocks go back first, so a later allocation
        # reuses the least recently filled ones last.
        for block_id in reversed(block_ids):
            self.ref_counts[block_id] -= 1
            if self.ref_counts[block_id] == 0:
                self.free_block_ids.append(block_id)
