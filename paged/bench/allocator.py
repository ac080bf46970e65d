"""Block manager speed: allocate+free, a 128-block prompt, fork, a prefix-cache hit, and the decode step's append.

Run: ``python -m paged.bench.allocator``. Every timing is taken in rounds that interleave the
contenders, so a busy machine slows all of them alike; each figure is the median over rounds (each
round the best of 3 repeats) with its spread (min–max), beside the machine's load (``uptime``). Times
are the process's CPU time (:func:`time.process_time`), so time this process spends waiting for a
core on a loaded machine is not counted.

Each group of rows has a bare-Python baseline measured in the same rounds:

* **allocate+free** of one block: a bare list's ``pop`` + ``append`` beside the
  :class:`~paged.block.BlockAllocator` (target ≥ 5,000,000 pairs/s) and the
  :class:`~paged.block.PrefixCachingBlockAllocator` holding no cached block (target: ≤ 1.5× the plain
  allocator's time);
* **a 128-block prompt**, a :class:`~paged.block.BlockTable` taking 128 blocks then freeing them
  (ns per block): 128 pops + one ``extend`` of a bare list; caching on ≤ 1.5× caching off;
* **fork + free of a 128-block table** (ns per block): 128 increments + 128 decrements of a bare
  list; and the fork alone (target ≤ 10 µs);
* **a full prefix-cache hit** on a 128-block prompt (hashing the prompt, finding and taking its
  blocks, then freeing them; µs);
* **the decode step's append**, ns per token at batch 1 and 64, prefix caching off and on (256 decode
  steps after a 100-token prompt, each step first adding a token to every sequence: its count, and with
  caching its id): the reference (:class:`~paged.block.PagedKVCacheManager`'s ``can_append_slots`` then
  ``append_slots`` per group, as the scheduler calls them) and the simulator's fast path (one
  ``append_slots_in_order`` of :class:`~paged.sim.fast.FastPagedKVCacheManager` per step), beside a
  bare-Python block manager (lists of token counts, tables and free blocks; with caching, the token ids
  too and a tuple hash of each block that fills) doing the same steps.
"""

from __future__ import annotations

import os
import statistics
import time
import timeit

from paged.bench import bench_parser
from paged.block import BlockAllocator, BlockTable, PagedKVCacheManager, PrefixCachingBlockAllocator
from paged.sim.fast import FastPagedKVCacheManager
from paged.cli import positive_int, run_command
from paged.core.sequence import Sequence, SequenceGroup, SequenceStatus

#: vLLM V1's published prefix-caching design (docs.vllm.ai, "Automatic Prefix Caching" design page and
#: the ``vllm.v1.core.block_pool`` / ``kv_cache_utils`` API pages), and what this allocator copies.
VLLM_V1_DESIGN = (
    ("block identity", "hash(parent block hash, block tokens, extra keys)",
     "copied: hash_block_tokens chains the same three parts"),
    ("collisions", "a tuple of token ids kept with the hash; sha256 available to make them negligible",
     "not copied: every hit compares the tokens and a never-reused parent content id, so a hit is exact "
     "under any hash (a weak one is only slower)"),
    ("free blocks", "FreeKVCacheBlockQueue: a doubly linked list in eviction order, O(1) removal of a "
     "cached block taken back from the middle", "copied for the cached free blocks (FreeBlockQueue over two "
     "flat lists of ids); the uncached free blocks sit on a plain stack in front of it"),
    ("freeing", "a request's blocks freed in reverse order and appended at the tail, so its tail is evicted "
     "first", "copied for cached blocks; uncached freed blocks go to the head, so they are reused "
     "before any cached KV is evicted"),
    ("duplicates", "a block that becomes full is cached even if an identical block is (block ids are "
     "append-only)", "block tables also stay append-only; the duplicate stays uncached (one cached block "
     "per content)"),
)

BLOCK_SIZE = 16
#: The decode rows: prompt tokens of each sequence, and decode steps timed.
DECODE_PROMPT, DECODE_STEPS = 100, 256
DECODE_BATCHES = (1, 64)


def _best_of(make, per: int, repeat: int = 3) -> float:
    """CPU seconds per unit of ``make()()`` (a fresh run each repeat; ``per`` units a run), best of ``repeat``."""
    best = float("inf")
    for _ in range(repeat):
        run = make()
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best / per


def _timeit(stmt: str, namespace: dict, number: int):
    """A contender timed by :mod:`timeit`: seconds per execution of ``stmt``, best of 3."""
    return lambda: min(timeit.repeat(stmt, globals=namespace, number=number, repeat=3, timer=time.process_time)) / number


def _rounds(contenders: dict, rounds: int) -> dict[str, list[float]]:
    """``{name: [seconds per unit, one per round]}``, the contenders timed one after another in every round."""
    out: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, timed in contenders.items():
            out[name].append(timed())
    return out


def _summary(seconds: list[float], unit: str) -> tuple[float, float, float]:
    scale = {"pairs/s": None, "µs": 1e6, "ns": 1e9}[unit]
    values = [1 / s for s in seconds] if scale is None else [s * scale for s in seconds]
    return statistics.median(values), min(values), max(values)


def _prefix_hit_setup(num_blocks: int, block_size: int = BLOCK_SIZE):
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


# -- the decode step's append ------------------------------------------------------------------
def _decode_paged(batch: int, caching: bool, fast: bool):
    """A manager with ``batch`` running one-sequence groups after their prefill, and a run of the decode
    steps: each adds a token to every sequence, then makes room for it (``fast``: the fast path's one call
    per step; else the reference's two calls per group)."""
    manager = (FastPagedKVCacheManager if fast else PagedKVCacheManager)(batch * (-(-(DECODE_PROMPT + DECODE_STEPS) // BLOCK_SIZE) + 1), BLOCK_SIZE,
                                  watermark=0.0, enable_prefix_caching=caching)
    groups = []
    for i in range(batch):
        ids = [1000 * i + t for t in range(DECODE_PROMPT)] if caching else None
        group = SequenceGroup(i, 0.0, [Sequence(i, DECODE_PROMPT, 0, ids)], DECODE_STEPS + 1)
        manager.allocate(group)
        group.seqs[0].status = SequenceStatus.RUNNING
        groups.append(group)
    seqs = [group.seqs[0] for group in groups]
    if fast:
        append = manager.append_slots_in_order
    else:
        can_append, append_slots = manager.can_append_slots, manager.append_slots

        def append(groups):  # the reference scheduler's decode step, without a preemption to make
            for group in groups:
                if can_append(group):
                    append_slots(group.seqs[0])

    def run():  # each step adds a token to every sequence (what Sequence.append_token does), then makes room
        for _ in range(DECODE_STEPS):
            for seq in seqs:
                seq.num_generated += 1
            append(groups)

    def run_caching():
        for step in range(DECODE_STEPS):
            for seq in seqs:
                seq.num_generated += 1
                seq.token_ids.append(step)
            append(groups)

    return run_caching if caching else run


def _decode_bare(batch: int, caching: bool):
    """The same steps on bare Python lists: a token count, a table and its slots per sequence, a free
    stack; with caching, token ids and the tuple hash of each block that fills, chained."""
    free = list(range(batch * (-(-(DECODE_PROMPT + DECODE_STEPS) // BLOCK_SIZE) + 1)))
    blocks = -(-DECODE_PROMPT // BLOCK_SIZE)
    tables = [[free.pop() for _ in range(blocks)] for _ in range(batch)]
    slots = [blocks * BLOCK_SIZE] * batch
    lens = [DECODE_PROMPT] * batch
    ids = [[1000 * i + t for t in range(DECODE_PROMPT)] for i in range(batch)]
    hashes = [[] for _ in range(batch)]
    bs, seqs = BLOCK_SIZE, range(batch)

    def run():
        for _ in range(DECODE_STEPS):
            for i in seqs:
                lens[i] += 1
            for i in seqs:
                n = lens[i]
                if n > slots[i]:
                    tables[i].append(free.pop())
                    slots[i] += bs

    def run_caching():
        for step in range(DECODE_STEPS):
            for i in seqs:
                lens[i] += 1
                ids[i].append(step)
            for i in seqs:
                n = lens[i]
                if n > slots[i]:
                    tables[i].append(free.pop())
                    slots[i] += bs
                if n % bs == 0:
                    chain = hashes[i]
                    chain.append(hash((chain[-1] if chain else -1, tuple(ids[i][n - bs:n]))))

    return run_caching if caching else run


def measure(number: int = 200_000, rounds: int = 7) -> dict:
    """Interleaved rounds of every timing (module docstring).

    Returns:
        ``{name: (median, min, max)}``: ``list_pairs_per_s``, ``alloc_free_per_s`` (caching off),
        ``apc_alloc_free_per_s`` (caching on; pairs/s); ``prompt128_bare_ns``, ``prompt128_off_ns``,
        ``prompt128_on_ns`` (ns per block); ``forkfree128_bare_ns``, ``forkfree128_off_ns``,
        ``forkfree128_on_ns`` (ns per block); ``fork_128_us``, ``prefix_hit_128_us`` (µs);
        ``decode_b{batch}_{off|on}_{bare|reference|fast}_ns`` (ns per token); plus ``load`` (the 1-minute load
        average before and after).
    """
    pool = list(range(1024))
    plain = BlockAllocator(1024, BLOCK_SIZE)
    cached = PrefixCachingBlockAllocator(1024, BLOCK_SIZE)
    table = BlockTable(BlockAllocator(256, BLOCK_SIZE))
    table.append_tokens(128 * BLOCK_SIZE)
    forks: list[BlockTable] = []
    tables = {}
    for name, allocator in (("off", BlockAllocator(256, BLOCK_SIZE)), ("on", PrefixCachingBlockAllocator(256, BLOCK_SIZE))):
        tables[name] = BlockTable(allocator)
        tables[name].append_tokens(128 * BLOCK_SIZE)
    per_prompt = max(number // 1000, 1)  # 128-block prompts (and forks) per timing
    load_before = os.getloadavg()[0]
    contenders = {
        "list_pairs_per_s": _timeit("append(pop())", {"append": pool.append, "pop": pool.pop}, number),
        "alloc_free_per_s": _timeit("free(allocate())", {"free": plain.free, "allocate": plain.allocate}, number),
        "apc_alloc_free_per_s": _timeit("free(allocate())", {"free": cached.free, "allocate": cached.allocate}, number),
        "prompt128_bare_ns": _timeit("got = [pop() for _ in r]; extend(reversed(got))",
                                     {"pop": pool.pop, "extend": pool.extend, "r": range(128)}, per_prompt),
        "prompt128_off_ns": _timeit("t = Table(a); t.append_tokens(n); t.free()",
                                    {"Table": BlockTable, "a": plain, "n": 128 * BLOCK_SIZE}, per_prompt),
        "prompt128_on_ns": _timeit("t = Table(a); t.append_tokens(n); t.free()",
                                   {"Table": BlockTable, "a": cached, "n": 128 * BLOCK_SIZE}, per_prompt),
        "forkfree128_bare_ns": _timeit("for i in r: c[i] += 1\nfor i in r: c[i] -= 1",
                                       {"c": [1] * 128, "r": range(128)}, per_prompt),
        "forkfree128_off_ns": _timeit("fork().free()", {"fork": tables["off"].fork}, per_prompt),
        "forkfree128_on_ns": _timeit("fork().free()", {"fork": tables["on"].fork}, per_prompt),
        "fork_128_us": _timeit("keep(fork())", {"keep": forks.append, "fork": table.fork}, 2_000),
        "prefix_hit_128_us": _timeit("hit()", {"hit": _prefix_hit_setup(128)}, 200),
    }
    for batch in DECODE_BATCHES:
        for caching in (False, True):
            key = f"decode_b{batch}_{'on' if caching else 'off'}"
            per = DECODE_STEPS * batch
            contenders[f"{key}_bare_ns"] = lambda b=batch, c=caching, p=per: _best_of(lambda: _decode_bare(b, c), p)
            for path in ("reference", "fast"):
                contenders[f"{key}_{path}_ns"] = lambda b=batch, c=caching, p=per, f=path == "fast": _best_of(
                    lambda: _decode_paged(b, c, f), p)
    times = _rounds(contenders, rounds)
    for child in forks:
        child.free()
    for timed_table in tables.values():
        timed_table.free()
    units = {"_per_s": "pairs/s", "_us": "µs", "_ns": "ns"}
    out = {name: _summary(t, next(u for suffix, u in units.items() if name.endswith(suffix)))
           for name, t in times.items()}
    for name in ("prompt128_bare_ns", "prompt128_off_ns", "prompt128_on_ns",
                 "forkfree128_bare_ns", "forkfree128_off_ns", "forkfree128_on_ns"):
        out[name] = tuple(v / 128 for v in out[name])  # per block
    out["load"] = (load_before, os.getloadavg()[0])
    return out


def main(argv: list[str] | None = None) -> None:
    """Print the block manager figures, whether each target is met, and vLLM V1's design beside ours."""
    parser = bench_parser("paged.bench.allocator", __doc__)
    parser.add_argument("--number", type=positive_int, default=200_000, help="allocate+free pairs per timing")
    parser.add_argument("--rounds", type=positive_int, default=7, help="interleaved rounds")
    run_command(parser, _report, argv)


def _ratio_line(label: str, r: dict, num: str, den: str, target: float | None = None) -> str:
    ratio = r[num][0] / r[den][0]
    note = f"  (target ≤ {target}x: {'met' if ratio <= target else 'NOT met'})" if target else ""
    return f"  {label:<44} {ratio:>8.2f}x{note}"


def _report(args) -> None:
    r = measure(args.number, args.rounds)
    load = r["load"]
    print(f"load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} CPUs; "
          f"CPU time, median over {args.rounds} interleaved rounds (min-max)")
    rows = (("allocate+free: bare list pop+append", "list_pairs_per_s", "pairs/s", None),
            ("  BlockAllocator, caching off", "alloc_free_per_s", "pairs/s", ("≥ 5,000,000", lambda v: v >= 5e6)),
            ("  PrefixCachingBlockAllocator", "apc_alloc_free_per_s", "pairs/s", None),
            ("128-block prompt + free: bare list", "prompt128_bare_ns", "ns/block", None),
            ("  BlockTable, caching off", "prompt128_off_ns", "ns/block", None),
            ("  BlockTable, caching on", "prompt128_on_ns", "ns/block", None),
            ("fork + free, 128 blocks: bare list", "forkfree128_bare_ns", "ns/block", None),
            ("  BlockTable, caching off", "forkfree128_off_ns", "ns/block", None),
            ("  BlockTable, caching on", "forkfree128_on_ns", "ns/block", None),
            ("fork of a 128-block table", "fork_128_us", "µs", ("≤ 10 µs", lambda v: v <= 10)),
            ("prefix hit, 128-block prompt", "prefix_hit_128_us", "µs", None))
    for batch in DECODE_BATCHES:
        for caching in ("off", "on"):
            key = f"decode_b{batch}_{caching}"
            rows += ((f"decode append b={batch} caching {caching}: bare", f"{key}_bare_ns", "ns/token", None),
                     ("  PagedKVCacheManager (reference)", f"{key}_reference_ns", "ns/token", None),
                     ("  FastPagedKVCacheManager (fast path)", f"{key}_fast_ns", "ns/token", None))
    for label, key, unit, target in rows:
        med, lo, hi = r[key]
        note = f"  (target {target[0]}: {'met' if target[1](med) else 'NOT met'})" if target else ""
        print(f"{label:<44} {med:>14,.2f} {unit:<8} [{lo:,.2f} - {hi:,.2f}]{note}")
    print("time ratios (medians):")
    print(_ratio_line("allocate+free, caching on / off", r, "alloc_free_per_s", "apc_alloc_free_per_s", 1.5))
    print(_ratio_line("128-block prompt, caching on / off", r, "prompt128_on_ns", "prompt128_off_ns", 1.5))
    print(_ratio_line("fork + free, caching on / off", r, "forkfree128_on_ns", "forkfree128_off_ns"))
    for batch in DECODE_BATCHES:
        for caching in ("off", "on"):
            key = f"decode_b{batch}_{caching}"
            for path in ("reference", "fast"):
                print(_ratio_line(f"decode append b={batch} caching {caching}, {path} / bare", r,
                                  f"{key}_{path}_ns", f"{key}_bare_ns"))
    print("\nvLLM V1's prefix-caching design, and this allocator:")
    for part, vllm, ours in VLLM_V1_DESIGN:
        print(f"- {part}: vLLM V1: {vllm}.\n  here: {ours}.")


if __name__ == "__main__":
    main()
