"""Allocator speed: allocate+free pairs per second with prefix caching off and on, a prefix-cache hit, a fork.

Run: ``python -m paged.bench.allocator``. Every timing is taken in rounds that interleave the
contenders (a bare Python list, the allocator without prefix caching, the prefix-caching allocator),
so a busy machine slows all of them alike; each figure is the median over rounds with its spread
(min–max), beside the machine's load (``uptime``). Targets: ≥ 5,000,000 allocate+free
pairs per second with caching off (the :class:`~paged.block.BlockAllocator` free stack, unchanged by
prefix caching, which lives in a subclass); the time of a full prefix-cache hit on a 128-block prompt
(hashing the prompt, finding and taking its blocks, then freeing them); ≤ 10 µs to fork a 128-block table.
"""

from __future__ import annotations

import os
import statistics
import timeit

from paged.bench import bench_parser
from paged.block import BlockAllocator, BlockTable, PagedKVCacheManager, PrefixCachingBlockAllocator
from paged.cli import positive_int, run_command
from paged.core.sequence import Sequence, SequenceGroup

#: vLLM V1's published prefix-caching design (docs.vllm.ai, "Automatic Prefix Caching" design page and
#: the ``vllm.v1.core.block_pool`` / ``kv_cache_utils`` API pages), and what this allocator copies.
VLLM_V1_DESIGN = (
    ("block identity", "hash(parent block hash, block tokens, extra keys)",
     "copied: hash_block_tokens chains the same three parts"),
    ("collisions", "a tuple of token ids kept with the hash; sha256 available to make them negligible",
     "not copied: every hit compares the tokens and a never-reused parent content id, so a hit is exact "
     "under any hash (a weak one is only slower)"),
    ("free blocks", "FreeKVCacheBlockQueue: a doubly linked list in eviction order, O(1) removal of a "
     "cached block taken back from the middle", "copied (FreeBlockQueue over two flat lists of ids)"),
    ("freeing", "a request's blocks freed in reverse order and appended at the tail, so its tail is evicted "
     "first", "copied for cached blocks; uncached freed blocks go to the head instead, so they are reused "
     "before any cached KV is evicted"),
    ("duplicates", "a block that becomes full is cached even if an identical block is (block ids are "
     "append-only)", "block tables also stay append-only; the duplicate stays uncached (one cached block "
     "per content)"),
)


def _rounds(contenders: dict, rounds: int) -> dict[str, list[float]]:
    """``{name: [seconds per operation, one per round]}``, the contenders timed one after another in every round."""
    out: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (stmt, namespace, number) in contenders.items():
            out[name].append(min(timeit.repeat(stmt, globals=namespace, number=number, repeat=3)) / number)
    return out


def _summary(seconds: list[float], per_s: bool) -> tuple[float, float, float]:
    values = [1 / s for s in seconds] if per_s else [s * 1e6 for s in seconds]
    return statistics.median(values), min(values), max(values)


def _prefix_hit_setup(num_blocks: int, block_size: int = 16):
    """A prefix-caching manager holding a cached ``num_blocks``-block prompt (+1 token), and a hit function."""
    tokens = list(range(1, num_blocks * block_size + 2))
    manager = PagedKVCacheManager(num_blocks + 8, block_size, watermark=0.0, enable_prefix_caching=True)
    first = SequenceGroup(0, 0.0, [Sequence(0, len(tokens), token_ids=list(tokens))], 1)
    manager.allocate(first)
    manager.free(first.seqs[0])  # the blocks stay cached (evictable)
    ids = iter(range(1, 10**9))

    def hit():
        seq = Sequence(next(ids), len(tokens), token_ids=tokens)
        group = SequenceGroup(0, 0.0, [seq], 1)
        manager.can_allocate(group)
        starts = manager.allocate(group)
        manager.free(seq)
        return starts

    assert hit() == [num_blocks * block_size]  # a full hit: every full block found
    return hit


def measure(number: int = 200_000, rounds: int = 7) -> dict:
    """Interleaved rounds of every timing (module docstring).

    Returns:
        ``{name: (median, min, max)}``: ``list_pairs_per_s``, ``alloc_free_per_s`` (caching off),
        ``apc_alloc_free_per_s`` (caching on; pairs/s), ``prefix_hit_128_us``, ``fork_128_us`` (µs),
        plus ``load`` (the 1-minute load average before and after).
    """
    pool = list(range(1024))
    plain = BlockAllocator(1024, 16)
    cached = PrefixCachingBlockAllocator(1024, 16)
    table = BlockTable(BlockAllocator(256, 16))
    table.append_tokens(128 * 16)
    forks: list[BlockTable] = []
    load_before = os.getloadavg()[0]
    contenders = {
        "list_pairs_per_s": ("append(pop())", {"append": pool.append, "pop": pool.pop}, number),
        "alloc_free_per_s": ("free(allocate())", {"free": plain.free, "allocate": plain.allocate}, number),
        "apc_alloc_free_per_s": ("free(allocate())", {"free": cached.free, "allocate": cached.allocate}, number),
        "prefix_hit_128_us": ("hit()", {"hit": _prefix_hit_setup(128)}, 200),
        "fork_128_us": ("keep(fork())", {"keep": forks.append, "fork": table.fork}, 2_000),
    }
    times = _rounds(contenders, rounds)
    for child in forks:
        child.free()
    out = {name: _summary(t, name.endswith("_per_s")) for name, t in times.items()}
    out["load"] = (load_before, os.getloadavg()[0])
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the allocator figures, whether each target is met, and vLLM V1's design beside ours."""
    parser = bench_parser("paged.bench.allocator", __doc__)
    parser.add_argument("--number", type=positive_int, default=200_000, help="allocate+free pairs per timing")
    parser.add_argument("--rounds", type=positive_int, default=7, help="interleaved rounds")
    run_command(parser, _report, argv)


def _report(args) -> None:
    r = measure(args.number, args.rounds)
    load = r["load"]
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs; "
          f"median over {args.rounds} interleaved rounds (min-max)")
    rows = (("bare list pop+append", "list_pairs_per_s", "pairs/s", None),
            ("BlockAllocator, caching off", "alloc_free_per_s", "pairs/s", ("≥ 5,000,000", lambda v: v >= 5e6)),
            ("PrefixCachingBlockAllocator", "apc_alloc_free_per_s", "pairs/s", None),
            ("prefix hit, 128-block prompt", "prefix_hit_128_us", "µs", None),
            ("fork of a 128-block table", "fork_128_us", "µs", ("≤ 10 µs", lambda v: v <= 10)))
    for label, key, unit, target in rows:
        med, lo, hi = r[key]
        note = f"  (target {target[0]}: {'met' if target[1](med) else 'NOT met'})" if target else ""
        print(f"{label:<30} {med:>14,.2f} {unit:<8} [{lo:,.2f} - {hi:,.2f}]{note}")
    print(f"caching on / off time ratio     {r['alloc_free_per_s'][0] / r['apc_alloc_free_per_s'][0]:>10.2f}x")
    print("\nvLLM V1's prefix-caching design, and this allocator:")
    for part, vllm, ours in VLLM_V1_DESIGN:
        print(f"- {part}: vLLM V1: {vllm}.\n  here: {ours}.")


if __name__ == "__main__":
    main()
