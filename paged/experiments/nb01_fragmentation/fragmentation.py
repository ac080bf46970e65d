"""Where KV cache memory goes: the paper's Fig. 2 and the waste-vs-block-size sweep (§3, §6.2).

Each system serves the same trace with the same scheduler; only the KV cache manager differs
(:data:`SYSTEMS`, built by :func:`paged.sim.simulator.make_kv_manager`). Time does not matter for where
memory goes when every request is already waiting (``rate=inf``, the default), so iterations take
a constant :data:`ITERATION_TIME`; a finite rate uses it to space arrivals against iterations.
"""

from __future__ import annotations

import pandas as pd

from paged.block.allocator import DEFAULT_BLOCK_SIZE
from paged.core.serving_loop import ServingResult
from paged.sim.iteration_cost import ConstantIterationTime
from paged.sim.deployment import get_model_spec
from paged.sim.model_spec import GiB, kv_cache_slots
from paged.sim.simulator import make_kv_manager, simulate
from paged.systems import FIG2_SYSTEMS

__all__ = [
    "SYSTEMS",
    "binding_note",
    "ITERATION_TIME",
    "default_num_slots",
    "memory_waste",
    "memory_waste_table",
    "waste_vs_block_size",
]

#: Systems compared in Fig. 2, in the paper's order (from the one registry, :mod:`paged.systems`).
SYSTEMS = FIG2_SYSTEMS

#: Seconds per iteration when only memory is measured: about one OPT-13B decode step on an
#: A100 (a 26 GB weight read at ~1.5 TB/s is ≈ 17 ms, plus KV reads); it only spaces
#: arrivals against iterations when the request rate is finite.
ITERATION_TIME = 0.025


def default_num_slots(model: str = "opt-13b", kv_cache_bytes: int = 12 * GiB, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """KV slots of ``kv_cache_bytes`` of KV cache for ``model`` (a Table 1 preset, a shipped config name or a
    ``config.json`` path, :func:`paged.sim.deployment.get_model_spec`), in whole blocks: the paper's default
    server, OPT-13B on one A100-40GB with 12 GiB of KV cache (Table 1), holds 15,728 slots in 16-token blocks."""
    return kv_cache_slots(get_model_spec(model), kv_cache_bytes, block_size)


def memory_waste(
    trace,
    system: str,
    *,
    num_slots: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_seq_len: int = 2048,
) -> tuple[dict[str, float], ServingResult]:
    """Average share of KV memory in token states / reservation / internal / external (Fig. 2).

    Averaged over the iterations in which at least one request was waiting (the cache is the
    binding constraint then), each iteration weighted equally.

    Returns:
        (fractions summing to 1, the :class:`~paged.core.serving_loop.ServingResult`).

    Raises:
        ValueError: for an unknown system, or if no iteration had a waiting request (the trace
            never fills the cache, so Fig. 2's average is undefined: use more requests or a smaller
            cache); RequestTooLargeError if a request can never fit.
    """
    num_slots = num_slots or default_num_slots(block_size=block_size)
    manager = make_kv_manager(system, num_slots // block_size, block_size, max_seq_len=max_seq_len)
    result = simulate(trace, manager, ConstantIterationTime(ITERATION_TIME), max_seq_len=max_seq_len)
    if result.memory.iterations == 0:
        raise ValueError(f"{system}: no iteration had a waiting request ({len(trace)} requests never fill the "
                         f"{num_slots}-slot KV cache), so the average over waiting iterations is undefined; "
                         f"use more requests or a smaller cache")
    return result.memory.mean(), result


def memory_waste_table(trace, systems=tuple(SYSTEMS), **kwargs) -> pd.DataFrame:
    """One row per system: the four fractions, average batched requests, iterations averaged."""
    rows = []
    for system in systems:
        fractions, result = memory_waste(trace, system, **kwargs)
        rows.append({"system": system, **fractions,
                     "avg_batched_requests": result.avg_batched_requests,
                     "iterations_averaged": result.memory.iterations})
    return pd.DataFrame(rows)


def waste_vs_block_size(trace, block_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256), *, num_slots=None,
                        max_seq_len: int = 2048) -> pd.DataFrame:
    """Paged manager's memory shares for each block size, same KV capacity in slots."""
    num_slots = num_slots or default_num_slots(block_size=1)
    rows = []
    for block_size in block_sizes:
        fractions, result = memory_waste(trace, "paged", num_slots=num_slots, block_size=block_size,
                                         max_seq_len=max_seq_len)
        rows.append({"block_size": block_size, **fractions,
                     "avg_batched_requests": result.avg_batched_requests})
    return pd.DataFrame(rows)


PARTS = ("token_states", "reservation", "internal", "external")
PART_LABELS = {"token_states": "token states", "reservation": "reservation",
               "internal": "internal fragmentation", "external": "external fragmentation & other"}


def worked_examples() -> pd.DataFrame:
    """Two worked examples of contiguous reservation against paging, computed with the library's allocators.

    1. One contiguous 16-slot reservation holding 7 tokens: 9 of 16 slots (56%) wasted.
    2. Five requests of 5, 13, 7, 18 and 10 tokens: 20-slot contiguous reservations take 100
       slots; 4-slot pages take 64 slots (16 blocks) for the same 53 tokens.
    """
    from paged.block.allocator import BlockAllocator
    from paged.block.block_table import BlockTable
    from paged.contiguous import reservation_size

    rows = [{"example": "one 16-slot reservation, 7 tokens", "tokens": 7,
             "contiguous_slots": reservation_size("max", 7, 1, 16), "paged_slots": None}]
    lengths = [5, 13, 7, 18, 10]
    alloc = BlockAllocator(64, 4)
    tables = [BlockTable(alloc) for _ in lengths]
    for table, n in zip(tables, lengths):
        table.append_tokens(n)
    rows.append({"example": "five requests, 20-slot reservations vs 4-slot pages",
                 "tokens": sum(lengths),
                 "contiguous_slots": sum(reservation_size("max", n, 1, 20) for n in lengths),
                 "paged_slots": (alloc.num_blocks - alloc.num_free_blocks) * alloc.block_size})
    df = pd.DataFrame(rows)
    df["contiguous_wasted"] = 1 - df["tokens"] / df["contiguous_slots"]
    df["paged_wasted"] = 1 - df["tokens"] / df["paged_slots"]
    return df


def fig2_comparison(ours: pd.DataFrame) -> pd.DataFrame:
    """The paper's Fig. 2 percentages beside ours (``memory_waste_table`` output), per part."""
    from paged.experiments.notebook.paper import FIG2_MEMORY_PERCENT

    rows = []
    for _, row in ours.iterrows():
        paper = FIG2_MEMORY_PERCENT.get(row["system"], {})
        for part in PARTS:
            theirs = paper.get(part)
            rows.append({"system": row["system"], "part": PART_LABELS[part],
                         "paper_percent": theirs, "ours_percent": round(100 * row[part], 1),
                         "difference_points": None if theirs is None else round(100 * row[part] - theirs, 1)})
    return pd.DataFrame(rows)


def binding_note(ours: pd.DataFrame, *, free_share: float = 0.10) -> str:
    """One sentence on whether the KV cache bound the paged run (``memory_waste_table`` output): the paper's
    Fig. 2 shares describe a cache that is full while requests wait. Where the paged manager left more than
    ``free_share`` of its slots free on average over the waiting iterations, the requests waited for
    something else (the batch budget), and its token-state share says how little the run filled the cache,
    not what paging wastes."""
    paged = ours[ours["system"] == "paged"]
    if paged.empty:
        return "No paged run in this table."
    free = float(paged["external"].iloc[0])
    if free <= free_share:
        return (f"The cache bound this run: paged left {100 * free:.1f}% of its slots free while requests waited, "
                "as in the paper's measurement.")
    return (f"The cache did NOT bind this run: paged left {100 * free:.1f}% of its slots free while requests waited "
            "(they waited for the batch budget), so its shares are not comparable with the paper's; use more "
            "requests or a smaller kv_cache_gib for a model with less KV per token.")


def plot_memory_breakdown(table: pd.DataFrame, *, external_label: str = PART_LABELS["external"]):
    """Stacked horizontal bars of the four parts per system (Fig. 2). Returns the Figure.

    Args:
        external_label: the legend's name for the free slots (the paper's "external fragmentation &
            other"; "free" where memory does not bind and free slots are simply unused).
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    colors = dict(zip(PARTS, sns.color_palette("colorblind", 4)))
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    systems = list(table["system"])
    left = [0.0] * len(systems)
    for part in PARTS:
        values = [100 * v for v in table[part]]
        ax.barh(systems, values, left=left, color=colors[part],
                label=external_label if part == "external" else PART_LABELS[part])
        for y, (x0, v) in enumerate(zip(left, values)):
            if v >= 6:
                ax.text(x0 + v / 2, y, f"{v:.1f}", ha="center", va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, values)]
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of KV cache memory (%)")
    ax.invert_yaxis()
    ax.legend(ncol=2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.28), frameon=False)
    fig.tight_layout()
    return fig


def plot_waste_vs_block_size(table: pd.DataFrame):
    """Paged memory allocated to sequences but not holding tokens (reservation + internal
    fragmentation, % of the cache) vs block size, one line per trace. Returns the Figure.

    Free memory is left out: with short requests the scheduler's 256-sequence limit, not the
    block size, can leave memory free.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    from paged.experiments.notebook.ticks import plain_log_ticks

    data = table.assign(allocated_unused_percent=100 * (table["reservation"] + table["internal"]))
    fig, ax = plt.subplots(figsize=(6, 3.2))
    sns.lineplot(data=data, x="block_size", y="allocated_unused_percent", hue="trace", marker="o", ax=ax)
    ax.set_xscale("log", base=2)
    plain_log_ticks(ax.xaxis)
    ax.set_xlabel("block size (tokens)")
    ax.set_ylabel("allocated, not holding tokens (%)")
    fig.tight_layout()
    return fig
