"""The prefix cache seen from the sequences: each one's chain of block hashes and content ids (§4.4, APC).

Kept per sequence, so a request waiting at the head of the queue hashes its prompt once, however often admission
asks. The hashes and the cache itself: :mod:`paged.block.prefix_caching`.
"""

from __future__ import annotations

from paged.block.block_table import BlockTable
from paged.block.prefix_caching import NO_PARENT, PrefixCachingBlockAllocator
from paged.core.sequence import Sequence

__all__ = ["SequenceHashes"]


class SequenceHashes:
    """Per-sequence ``(hash, token ids)`` of full blocks and content ids of cached ones, in ``allocator``'s cache."""

    __slots__ = ("allocator", "block_size", "_hashes", "_cids")

    def __init__(self, allocator: PrefixCachingBlockAllocator) -> None:
        self.allocator = allocator
        self.block_size = allocator.block_size
        self._hashes: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        self._cids: dict[int, list[int]] = {}

    def block_hashes(self, seq: Sequence, upto: int) -> list[tuple[int, tuple[int, ...]]]:
        """``(chained hash, token ids)`` of the first ``upto`` full blocks, each computed once. O(new tokens)."""
        hashes = self._hashes.setdefault(seq.seq_id, [])
        hash_fn = self.allocator.hash_fn
        bs = self.block_size
        token_ids = seq.token_ids
        while len(hashes) < upto:
            i = len(hashes)
            tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            hashes.append((hash_fn(hashes[-1][0] if hashes else NO_PARENT, tokens, None), tokens))
        return hashes

    def cache_hits(self, seq: Sequence, limit: int) -> list[tuple[int, int]]:
        """``(block, content id)`` of the longest cached run (≤ ``limit`` blocks) the sequence starts with; none
        without token ids. Read-only. O(limit × block_size)."""
        if seq.token_ids is None:
            return []
        limit = min(limit, len(seq.token_ids) // self.block_size)
        hashes = self.block_hashes(seq, limit)
        lookup = self.allocator.lookup
        hits: list[tuple[int, int]] = []
        parent = NO_PARENT
        for i in range(limit):
            block_hash, tokens = hashes[i]
            hit = lookup(block_hash, parent, tokens)
            if hit is None:
                break
            hits.append(hit)
            parent = hit[1]
        return hits

    def start(self, seq: Sequence, hit_cids: list[int]) -> None:
        """Begin the sequence's chain of content ids with the cache hits it was allocated with."""
        self._cids[seq.seq_id] = list(hit_cids)

    def register_full_blocks(self, seq: Sequence, table: BlockTable) -> None:
        """Register the table's full blocks of known tokens past the chain's end. O(new blocks), O(1) if none."""
        cids = self._cids.get(seq.seq_id)
        if cids is None or seq.token_ids is None:
            return
        full = min(table.num_tokens, len(seq.token_ids)) // self.block_size
        if len(cids) >= full:
            return
        hashes = self.block_hashes(seq, full)
        blocks = table.physical_blocks
        for i in range(len(cids), full):
            block_hash, tokens = hashes[i]
            cids.append(self.allocator.register(blocks[i], block_hash, cids[-1] if cids else NO_PARENT, tokens))

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """The child starts with the parent's chain (same tokens so far). O(blocks)."""
        if parent.seq_id in self._cids:
            self._cids[child.seq_id] = list(self._cids[parent.seq_id])
            self._hashes[child.seq_id] = list(self._hashes.get(parent.seq_id, ()))

    def drop(self, seq: Sequence) -> None:
        """Forget the sequence (it finished). O(1)."""
        self._cids.pop(seq.seq_id, None)
        self._hashes.pop(seq.seq_id, None)
