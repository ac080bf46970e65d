"""Planning a prefill: where each logical block of each sequence comes from (§4.4, §4.5).

:func:`plan_prefill` picks, changing nothing, for each block a prefill computes: a **reserved-prefix** block
(``SequenceGroup.prefix_len``, pinned); a **prefix-cache hit** (the longest cached run, never the last token's
block, so its logits are computed); the **same block as an earlier sequence** (a group preempted by
recomputation shares again what it shared); or a **new** block. A new group's samples fork its first sequence.
The plan gives the scheduler tokens to compute, blocks needed, start positions; ``PagedKVCacheManager.allocate``
carries it out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from paged.block.allocator import BlockAllocator
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

__all__ = ["PrefillPlan", "plan_prefill", "NEW", "HIT", "SIBLING", "PREFIX"]

#: Where a logical block of a planned prefill comes from.
NEW, HIT, SIBLING, PREFIX = 0, 1, 2, 3


@dataclass(slots=True)
class PrefillPlan:
    """A planned prefill of a group's waiting sequences ``seqs`` (in group order). ``sources[j][i]`` is where block
    ``i`` of computed sequence ``j`` comes from: ``(NEW, 0)``, ``(HIT, block)``, ``(SIBLING, j')`` (sequence ``j'``'s
    block ``i``) or ``(PREFIX, i)``. ``starts``: each sequence's first token to compute; ``hit_cids``: cache hits'
    content ids; ``forks``: sequences forking the first; ``needed``: free blocks taken (evictable hits included);
    ``total``: distinct blocks held after; ``reserve``: prefix blocks to allocate first; ``tokens``: to compute."""

    seqs: list[Sequence]
    sources: list[list[tuple[int, int]]]
    starts: list[int]
    hit_cids: list[list[int]]
    forks: int = 0
    needed: int = 0
    total: int = 0
    reserve: int = 0
    tokens: int = 0


def plan_prefill(seq_group: SequenceGroup, *, block_size: int, allocator: BlockAllocator,
                 layouts: dict[int, list[int]], reserved: dict[int, list[int]],
                 cache_hits: Callable[[Sequence, int], list[tuple[int, int]]] | None) -> PrefillPlan:
    """Plan the prefill of ``seq_group``'s waiting sequences (module docstring). O(blocks). ``block_size``:
    tokens per block; ``layouts``: seq_id → full blocks when preempted; ``reserved``: prefix_len → pinned blocks;
    ``cache_hits(seq, limit)`` → ``(block, content id)`` of its cached leading blocks (None: no caching)."""
    bs = block_size
    waiting = seq_group.get_seqs(SequenceStatus.WAITING)
    fresh = all(seq.num_generated == 0 for seq in waiting)
    computed = waiting[:1] if fresh else waiting
    plan = PrefillPlan(waiting, [], [], [], forks=len(waiting) - len(computed))
    prefix_len = seq_group.prefix_len
    if prefix_len and prefix_len not in reserved:
        plan.reserve = prefix_len // bs
    first_holder: dict[int, int] = {}  # block at preemption -> first sequence of the plan holding it
    counted: set[int] = set()
    for j, seq in enumerate(computed):
        n = seq.num_tokens
        num_blocks = -(-n // bs)
        limit = (n - 1) // bs  # the block holding the last token is always computed
        hits: list[tuple[int, int]] = []
        if prefix_len:
            sources = [(PREFIX, i) for i in range(min(prefix_len // bs, limit))]
        elif cache_hits is not None:
            hits = cache_hits(seq, limit)
            sources = [(HIT, b) for b, _ in hits]
        else:
            sources = []
        old = layouts.get(seq.seq_id, ())[:limit]
        if old:
            shared = len(sources)  # blocks taken from the prefix or the cache
            get = first_holder.get
            for block in old[shared:]:  # a block an earlier sequence held too is shared again
                holder = get(block, j)
                sources.append((SIBLING, holder) if holder != j else (NEW, 0))
            sources.extend([(NEW, 0)] * (num_blocks - len(sources)))
            for block in old:
                first_holder.setdefault(block, j)
            covered = next((i for i in range(shared, num_blocks) if sources[i][0] == NEW), num_blocks)
            new = sum(kind == NEW for kind, _ in sources[shared:])
        else:  # nothing held before: every block past the shared ones is new (the common case, in one step)
            covered = len(sources)
            new = num_blocks - covered
            sources.extend([(NEW, 0)] * new)
        plan.sources.append(sources)
        plan.hit_cids.append([cid for _, cid in hits])
        plan.starts.append(covered * bs)
        plan.tokens += n - covered * bs
        plan.needed += new
        plan.total += new
        for block, _ in hits:
            if block not in counted:
                counted.add(block)
                plan.total += 1
                plan.needed += allocator.ref_count(block) == 0  # an evictable block leaves the free pool
    if prefix_len:
        plan.total += prefix_len // bs
    plan.needed += plan.reserve
    plan.starts += [waiting[0].num_tokens] * plan.forks
    return plan
