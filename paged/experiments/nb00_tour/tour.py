"""The tour's six views (``notebooks/00_tour.ipynb``), each computed by the library itself (§3, §4).

Nothing here re-implements a mechanism: every number comes from the real
:class:`~paged.block.BlockAllocator`, :class:`~paged.block.BlockTable` (fork and copy-on-write),
:func:`~paged.contiguous.reservation_size`, :class:`~paged.contiguous.buddy.BuddyAllocator`, and the
:class:`~paged.core.Scheduler` over a manager from :func:`paged.systems.make_kv_manager`. Each
function returns plain data (a dict or a DataFrame, lengths in tokens, sizes in slots or blocks);
:mod:`paged.experiments.nb00_tour.tour_figures` draws it and :mod:`paged.experiments.nb00_tour.explorer` puts it behind
sliders.

1. :func:`reservation` — one contiguous reservation: slots used, reserved but unused, rounded up by
   the buddy allocator (§3, Fig. 3).
2. :func:`pages` — blocks allocated one at a time as a request's tokens grow (§4.2, Fig. 6).
3. :func:`block_tables` — requests growing together: logical blocks map to scattered physical
   blocks (§4.3, Fig. 7).
4. :func:`sharing` — two requests forked from one prefix share its blocks; a shared, partly filled
   last block is copied on write (§4.4, Fig. 8).
5. :func:`batch` — a batch's memory under contiguous reservations and under paging (§3, Fig. 2).
6. :func:`replay` — a trace served step by step by the scheduler: who runs, waits, is preempted,
   and which slots each request holds (§4.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from paged.block import BlockAllocator, BlockTable
from paged.contiguous import reservation_size
from paged.contiguous.buddy import BuddyAllocator
from paged.core.max_model_len import check_request_len
from paged.core.scheduler import Scheduler
from paged.core.sequence import SequenceStatus
from paged.sim.simulator import groups_from_trace
from paged.systems import make_kv_manager
from paged.workloads import Trace, get_trace

__all__ = ["reservation", "pages", "block_tables", "sharing", "batch", "tiny_trace", "replay", "Step",
           "SENTENCES", "SLOT_FREE"]

#: The block-table view's requests, one word per token (a picture of tokens, not a tokenizer's).
SENTENCES = ("The red fox crossed the quiet field", "A cache block holds keys and values",
             "Pages keep their reading order")
#: Owner id of a free slot in :class:`Step` memory maps.
SLOT_FREE = -1


def _pow2(n: int) -> int:
    """The smallest power of two ≥ ``n`` (a buddy space that holds a reservation of ``n`` slots)."""
    return 1 << max(0, n - 1).bit_length()


def reservation(prompt_len: int, output_len: int, policy: str = "max", max_seq_len: int = 16) -> dict:
    """One request in one contiguous reservation, as an Orca system allocates it (§3, §6.1).

    The policy decides the reservation (:func:`~paged.contiguous.reservation_size`); the buddy
    allocator then hands out the next power of two (:class:`~paged.contiguous.buddy.BuddyAllocator`
    over a space of ``max_seq_len`` rounded up to a power of two).

    Returns:
        ``used`` (prompt + output tokens), ``reserved`` (the policy's slots), ``allocated`` (the
        buddy block), ``wasted`` (allocated − used), ``wasted_share``, and ``slots``: one label per
        allocated slot, ``"prompt"``, ``"output"``, ``"reserved, never used"`` or ``"buddy rounding"``.

    Raises:
        ValueError: for an unknown policy, lengths < 1, or a request longer than ``max_seq_len``.
    """
    used = prompt_len + output_len
    if used > max_seq_len:
        raise ValueError(f"prompt {prompt_len} + output {output_len} = {used} tokens do not fit a "
                         f"{max_seq_len}-token maximum sequence length")
    reserved = reservation_size(policy, prompt_len, output_len, max_seq_len)
    buddy = BuddyAllocator(_pow2(max_seq_len))
    start = buddy.allocate(reserved)
    allocated = 1 << buddy.allocated[start]
    slots = (["prompt"] * prompt_len + ["output"] * output_len + ["reserved, never used"] * (reserved - used)
             + ["buddy rounding"] * (allocated - reserved))
    return {"policy": policy, "used": used, "reserved": reserved, "allocated": allocated,
            "wasted": allocated - used, "wasted_share": 1 - used / allocated, "slots": slots}


def pages(num_tokens: int, block_size: int = 4) -> pd.DataFrame:
    """A request's blocks as its tokens arrive one at a time (§4.2): ``BlockTable.append_tokens(1)``
    per token on a fresh allocator.

    Returns:
        One row per logical block: ``logical``, ``physical``, ``filled`` (tokens in it),
        ``block_size``, ``allocated_at_token`` (the token, 1-based, whose arrival allocated it).

    Raises:
        ValueError: if ``num_tokens`` or ``block_size`` is < 1.
    """
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be ≥ 1, got {num_tokens}")
    table = BlockTable(BlockAllocator(-(-num_tokens // block_size), block_size))
    allocated_at = []
    for token in range(1, num_tokens + 1):
        before = table.num_blocks
        table.append_tokens(1)
        allocated_at += [token] * (table.num_blocks - before)
    blocks = table.physical_blocks
    filled = [min(block_size, num_tokens - i * block_size) for i in range(len(blocks))]
    return pd.DataFrame({"logical": range(len(blocks)), "physical": blocks, "filled": filled,
                         "block_size": block_size, "allocated_at_token": allocated_at})


def block_tables(sentences=SENTENCES, block_size: int = 2, seed: int = 0) -> pd.DataFrame:
    """Requests that grow together on one allocator (§4.3, Fig. 7): at each step a random request
    with words left appends its next word (one token), so their blocks interleave in memory.

    Returns:
        One row per (request, logical block): ``request``, ``logical``, ``physical``, ``words``
        (the words in the block), ``ref_count``; plus ``num_blocks`` (the cache's blocks).
    """
    words = [sentence.split() for sentence in sentences]
    num_blocks = sum(-(-len(w) // block_size) for w in words)
    allocator = BlockAllocator(num_blocks, block_size)
    tables = [BlockTable(allocator) for _ in words]
    rng = np.random.default_rng(seed)
    while any(table.num_tokens < len(w) for table, w in zip(tables, words)):
        growing = [i for i, (table, w) in enumerate(zip(tables, words)) if table.num_tokens < len(w)]
        tables[int(rng.choice(growing))].append_tokens(1)
    rows = [{"request": r, "logical": i, "physical": b, "words": " ".join(w[i * block_size:(i + 1) * block_size]),
             "ref_count": allocator.ref_count(b), "num_blocks": num_blocks}
            for r, (table, w) in enumerate(zip(tables, words)) for i, b in enumerate(table.physical_blocks)]
    return pd.DataFrame(rows)


def sharing(prefix_len: int, a_len: int, b_len: int, block_size: int = 4) -> dict:
    """Two requests that start with the same ``prefix_len`` tokens (§4.4, Fig. 8): A holds the
    prefix, B is ``A.fork()`` (every block shared, reference counts 2), then A appends ``a_len`` and
    B ``b_len`` tokens of their own. A write into the shared, partly filled last block copies it.

    Returns:
        ``tables`` (``{"A": [...], "B": [...]}`` physical blocks), ``ref_counts`` (per physical
        block), ``shared`` (blocks both hold), ``copies`` (copy-on-write ``(src, dst)`` pairs),
        ``blocks_used`` (distinct blocks), ``blocks_without_sharing`` (the two tables' blocks
        added up), ``saved`` (their difference).

    Raises:
        ValueError: for negative lengths or a prefix < 1.
    """
    if prefix_len < 1 or a_len < 0 or b_len < 0:
        raise ValueError(f"need prefix_len ≥ 1 and continuations ≥ 0, got {prefix_len}, {a_len}, {b_len}")
    total = -(-prefix_len // block_size) + -(-(a_len + block_size) // block_size) + -(-(b_len + block_size) // block_size)
    allocator = BlockAllocator(total, block_size)
    a = BlockTable(allocator)
    a.append_tokens(prefix_len)
    b = a.fork()
    copies = a.append_tokens(a_len) + b.append_tokens(b_len)
    tables = {"A": a.physical_blocks, "B": b.physical_blocks}
    used = sorted(set(tables["A"]) | set(tables["B"]))
    return {"tables": tables, "tokens": {"A": a.num_tokens, "B": b.num_tokens}, "prefix_len": prefix_len,
            "block_size": block_size, "ref_counts": {blk: allocator.ref_count(blk) for blk in used},
            "shared": sorted(set(tables["A"]) & set(tables["B"])), "copies": copies, "blocks_used": len(used),
            "blocks_without_sharing": a.num_blocks + b.num_blocks,
            "saved": a.num_blocks + b.num_blocks - len(used)}


def batch(prompt_lens, output_lens, *, policy: str = "max", max_seq_len: int = 20, block_size: int = 4) -> pd.DataFrame:
    """A batch's KV memory: one contiguous reservation per request (the policy's size, then the
    buddy allocator's power of two) against blocks on demand (§3).

    Returns:
        One row per request: ``request``, ``tokens``, ``reserved`` (policy), ``buddy_allocated``,
        ``paged_blocks``, ``paged_slots`` (blocks × block size).

    Raises:
        ValueError: if the lists differ in length or a request is longer than ``max_seq_len``.
    """
    if len(prompt_lens) != len(output_lens):
        raise ValueError(f"{len(prompt_lens)} prompt lengths but {len(output_lens)} output lengths")
    buddy = BuddyAllocator(_pow2(max(1, len(prompt_lens)) * _pow2(max_seq_len)))
    allocator = BlockAllocator(sum(-(-(p + o) // block_size) for p, o in zip(prompt_lens, output_lens)) or 1,
                               block_size)
    rows = []
    for i, (p, o) in enumerate(zip(prompt_lens, output_lens)):
        if p + o > max_seq_len:
            raise ValueError(f"request {i}: {p} + {o} tokens exceed max_seq_len={max_seq_len}")
        reserved = reservation_size(policy, p, o, max_seq_len)
        start = buddy.allocate(reserved)
        table = BlockTable(allocator)
        table.append_tokens(p + o)
        rows.append({"request": i, "tokens": p + o, "reserved": reserved,
                     "buddy_allocated": 1 << buddy.allocated[start], "paged_blocks": table.num_blocks,
                     "paged_slots": table.num_blocks * block_size})
    return pd.DataFrame(rows)


def tiny_trace(num_requests: int, max_seq_len: int = 32, *, rate: float = 0.5, seed: int = 0) -> Trace:
    """Real ShareGPT requests shrunk to a ``max_seq_len``-token model: lengths × max_seq_len / 2048
    (at least 1 token each), Poisson arrivals at ``rate`` requests per step (time unit: one step).

    Raises:
        ValueError: as :func:`paged.workloads.get_trace`.
    """
    base = get_trace("sharegpt", num_requests, seed=seed, rate=rate)
    scale = max_seq_len / 2048
    return Trace.from_lengths([max(1, int(r.prompt_len * scale)) for r in base],
                              [max(1, int(r.output_len * scale)) for r in base], name=f"sharegpt/{2048 // max_seq_len}",
                              arrival_times=[math.floor(r.arrival_time) for r in base])


@dataclass(frozen=True, slots=True)
class Step:
    """What one scheduler step ran, and where each request's KV cache was (§4.5).

    Attributes:
        step: step index (the time unit of :func:`tiny_trace`'s arrivals).
        kind: ``"prefill"``, ``"decode"`` or ``"idle"`` (nothing arrived yet).
        running, waiting, swapped, preempted, finished: request ids (preempted: this step).
        owner: per KV slot, the request holding it (:data:`SLOT_FREE` if free), shape ``[num_slots]``.
        filled: per KV slot, True if it holds a token's K/V (else reserved or rounding), shape ``[num_slots]``.
    """

    step: int
    kind: str
    running: tuple
    waiting: tuple
    swapped: tuple
    preempted: tuple
    finished: tuple
    owner: np.ndarray
    filled: np.ndarray


def _memory_map(manager, running, num_slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Slot owners and filled slots of the running sequences, read through the manager's block tables."""
    owner = np.full(num_slots, SLOT_FREE, dtype=np.int32)
    filled = np.zeros(num_slots, dtype=bool)
    size = manager.block_size
    for group in running:
        for seq in group.get_seqs(SequenceStatus.RUNNING):
            blocks = manager.get_block_table(seq)
            slots = (np.repeat(blocks, size) * size + np.tile(np.arange(size), len(blocks)))
            buddy = getattr(manager, "buddy", None)
            if buddy is not None:  # a contiguous reservation also holds the buddy allocator's rounding
                slots = np.arange(slots[0], slots[0] + (1 << buddy.allocated[int(slots[0])]))
            owner[slots] = group.request_id
            filled[slots[: seq.num_tokens]] = True
    return owner, filled


def replay(trace, system: str = "paged", *, num_slots: int = 64, block_size: int = 4, max_seq_len: int = 32,
           preemption: str = "recompute", max_steps: int = 400) -> list[Step]:
    """Serve ``trace`` step by step with the real :class:`~paged.core.Scheduler` over
    ``make_kv_manager(system, num_slots // block_size, block_size, ...)``: each step admits the requests that arrived by then,
    schedules, records a :class:`Step`, gives every running sequence one token and retires the
    finished ones (the same iteration as :func:`paged.sim.simulator.simulate`, one step per time unit).

    Args:
        trace: requests with integer arrival steps (e.g. :func:`tiny_trace`).
        system: ``"paged"`` or an Orca system (``"orca-max"``, ``"orca-pow2"``, ``"orca-oracle"``).
        num_slots: KV cache capacity (tokens); block_size: the paged manager's block (tokens).
        preemption: ``"recompute"`` or ``"swap"`` (paged only; swap space = the GPU's size).
        max_steps: stop after this many steps.

    Returns:
        One :class:`Step` per step, until every request finished or ``max_steps``.

    Raises:
        ValueError: for an unknown system or preemption mode; RequestTooLargeError if a request
            could never fit.
    """
    cpu_blocks = num_slots // block_size if system == "paged" and preemption == "swap" else 0
    manager = make_kv_manager(system, num_slots // block_size, block_size, max_seq_len=max_seq_len,
                              num_cpu_blocks=cpu_blocks, watermark=0.0)
    scheduler = Scheduler(manager, max_num_batched_tokens=max(2 * max_seq_len, 16), preemption_mode=preemption)
    groups = groups_from_trace(trace)
    for group in groups:  # what every system refuses up front (the message simulate gives)
        check_request_len(group.request_id, group.prompt_len, group.output_len, max_seq_len)
    steps, finished, arrived = [], [], 0
    while (arrived < len(groups) or scheduler.has_unfinished_seqs()) and len(steps) < max_steps:
        now = len(steps)
        while arrived < len(groups) and groups[arrived].arrival_time <= now:
            scheduler.add_seq_group(groups[arrived])
            arrived += 1
        outputs = scheduler.schedule()
        owner, filled = _memory_map(manager, scheduler.running, num_slots)
        kind = "idle" if outputs.is_empty else "prefill" if outputs.is_prefill else "decode"
        steps.append(Step(now, kind, tuple(g.request_id for g in scheduler.running),
                          tuple(g.request_id for g in scheduler.waiting), tuple(g.request_id for g in scheduler.swapped),
                          tuple(g.request_id for g in outputs.preempted), tuple(finished), owner, filled))
        for group in outputs.scheduled_seq_groups:
            for seq in group.get_seqs(SequenceStatus.RUNNING):
                seq.append_token()
                if seq.num_generated >= group.output_len:
                    scheduler.finish_seq(seq)
        finished += [g.request_id for g in scheduler.free_finished_seq_groups()]
    return steps
