"""Allocator speed: allocate+free pairs per second against a bare Python list, and fork time.

Run: ``python -m paged.bench.allocator``. Targets (issue 2): ≥ 3,000,000 allocate+free pairs
per second in CPython, within 5× of a bare ``list.pop`` / ``list.append`` pair measured in the
same run, and ≤ 10 µs to fork a 128-block table.
"""

from __future__ import annotations

import timeit

from paged.block import BlockAllocator, BlockTable
from paged.bench import bench_parser
from paged.cli import positive_int, run_command


def measure(number: int = 200_000, repeat: int = 5) -> dict[str, float]:
    """Best-of-``repeat`` timings.

    Returns:
        ``alloc_free_per_s`` and ``list_pop_append_per_s`` (pairs per second), their ratio
        ``slowdown_vs_list``, and ``fork_128_us`` (microseconds per fork of a 128-block table;
        the children are freed outside the timed loop).
    """
    alloc = BlockAllocator(1024, 16)
    allocate, free = alloc.allocate, alloc.free

    def alloc_free():
        free(allocate())

    pool = list(range(1024))
    pop, append = pool.pop, pool.append

    def list_pair():
        append(pop())

    t_alloc = min(timeit.repeat(alloc_free, number=number, repeat=repeat)) / number
    t_list = min(timeit.repeat(list_pair, number=number, repeat=repeat)) / number

    table = BlockTable(BlockAllocator(256, 16))
    table.append_tokens(128 * 16)
    n_fork = 2_000
    best_fork = float("inf")
    for _ in range(repeat):
        children = []
        fork, keep = table.fork, children.append
        start = timeit.default_timer()
        for _ in range(n_fork):
            keep(fork())
        best_fork = min(best_fork, (timeit.default_timer() - start) / n_fork)
        for child in children:
            child.free()
    return {
        "alloc_free_per_s": 1 / t_alloc,
        "list_pop_append_per_s": 1 / t_list,
        "slowdown_vs_list": t_alloc / t_list,
        "fork_128_us": best_fork * 1e6,
    }


def main(argv: list[str] | None = None) -> None:
    """Print the allocator figures and whether each target is met."""
    parser = bench_parser("paged.bench.allocator", __doc__)
    parser.add_argument("--number", type=positive_int, default=200_000, help="operations per timing")
    run_command(parser, _report, argv)


def _report(args) -> None:
    r = measure(args.number)
    print(f"BlockAllocator allocate+free : {r['alloc_free_per_s']:>12,.0f} pairs/s "
          f"(target ≥ 3,000,000: {'met' if r['alloc_free_per_s'] >= 3e6 else 'NOT met'})")
    print(f"bare list pop+append         : {r['list_pop_append_per_s']:>12,.0f} pairs/s")
    print(f"allocator / list time ratio  : {r['slowdown_vs_list']:>12.2f}x "
          f"(target ≤ 5x: {'met' if r['slowdown_vs_list'] <= 5 else 'NOT met'})")
    print(f"fork of a 128-block table    : {r['fork_128_us']:>12.2f} µs "
          f"(target ≤ 10 µs: {'met' if r['fork_128_us'] <= 10 else 'NOT met'})")


if __name__ == "__main__":
    main()
