"""Fast-forward a run of decode iterations in which nothing changes (simulator speed, §6).

Most simulated iterations are decodes of the same batch: every running sequence gains one token,
and nothing else happens. :func:`decode_run` takes a decode iteration the scheduler has just set
up and applies it together with the following ``k - 1`` iterations of the same batch, as long
as, before each of those iterations, the step-by-step loop would have made exactly the same
decision:

* no request arrives (the clock is advanced iteration by iteration, with the same float
  additions as the step-by-step loop, and stops as soon as an arrival is due);
* no sequence finishes before the last iteration of the run (finishing in the last is fine);
* every block-boundary crossing finds a free block (so no preemption; allocations only shrink
  the free pool, so a waiting or swapped request that did not fit still does not fit);
* nothing was preempted, swapped or copied in the first iteration.

Then each sequence gains ``k`` tokens with one ``append_slots`` call, and the memory breakdown
that the step-by-step loop would have recorded at each of the ``k`` iterations is summed in
closed form (integers, so exactly). Runs need one running sequence per group (no shared
blocks), which is what :func:`paged.simulator.simulate` builds; otherwise the caller steps.
"""

from __future__ import annotations

from collections.abc import Callable

from paged.block_manager import PagedKVCacheManager
from paged.contiguous import ContiguousKVCacheManager
from paged.scheduler import Scheduler, SchedulerOutputs

__all__ = ["decode_run", "ceil_sum"]


def ceil_sum(x: int, block_size: int) -> int:
    """``sum(ceil(m / block_size) for m in 1..x)`` in O(1) (blocks), for ``x ≥ 0``."""
    q, r = divmod(x, block_size)
    return block_size * q * (q + 1) // 2 + r * (q + 1)


def _block_limit(ns: list[int], block_size: int, free: int, kmax: int) -> int:
    """Most iterations (≤ ``kmax``) whose block-boundary crossings the free pool covers.

    Sequence ``i`` has room for ``ns[i]`` tokens in whole blocks; at iteration ``j`` it needs
    room for ``ns[i] + j``, i.e. a new block at ``j = first_i, first_i + block_size, ...``.
    """
    events = []
    for n in ns:
        first = -(-n // block_size) * block_size - n + 1
        if first < kmax:
            events.extend(range(first, kmax, block_size))
    if len(events) <= free:
        return kmax
    events.sort()
    return events[free]  # iteration that would need block number free + 1: stop before it


def decode_run(
    scheduler: Scheduler,
    outputs: SchedulerOutputs,
    decode_time: Callable[[int, int], float],
    now: float,
    next_arrival_time: float,
    memory=None,
) -> tuple[float, int] | None:
    """Apply the scheduled decode iteration and every following one that would be identical.

    Args:
        scheduler: the scheduler that produced ``outputs`` (its manager is used).
        outputs: a decode iteration just returned by ``scheduler.schedule()``.
        decode_time: ``decode_time(num_seqs, context_tokens) -> seconds`` of one iteration.
        now: the clock when the first iteration starts (seconds).
        next_arrival_time: when the next request arrives (seconds; ``inf`` if none).
        memory: a :class:`paged.simulator.MemoryStats` to add the run's breakdown to, or None.

    Returns:
        ``(clock after the run, k iterations applied)``; finished sequences are finished
        (``finish_seq``) but their groups are left for ``free_finished_seq_groups``. ``None``
        (nothing changed) if the iteration is not eligible: it preempted, swapped or copied,
        a group has several sequences, or the manager is of an unknown kind.
    """
    if outputs.preempted or outputs.blocks_to_swap_in or outputs.blocks_to_swap_out or outputs.blocks_to_copy:
        return None
    manager = scheduler.kv_manager
    paged = isinstance(manager, PagedKVCacheManager)
    if not paged and not isinstance(manager, ContiguousKVCacheManager):
        return None
    groups = outputs.scheduled_seq_groups
    seqs = []
    kmax = None
    for group in groups:
        if len(group.seqs) != 1:
            return None
        seq = group.seqs[0]
        seqs.append(seq)
        left = group.output_len - seq.num_generated
        if kmax is None or left < kmax:
            kmax = left
    num_seqs = len(seqs)
    ns = [seq.num_tokens for seq in seqs]
    if paged and kmax > 1:
        kmax = _block_limit(ns, manager.block_size, manager.gpu_allocator.num_free_blocks, kmax)
    # The clock, iteration by iteration, exactly as the step-by-step loop adds it.
    context = sum(ns)
    k = 0
    first_end = None
    while True:
        now += decode_time(num_seqs, context)
        k += 1
        if first_end is None:
            first_end = now
        if k >= kmax or next_arrival_time <= now:
            break
        context += num_seqs
    if memory is not None:
        _add_memory(memory, manager, groups, ns, k, paged)
    for group, seq in zip(groups, seqs):
        seq.num_generated += k - 1
        if k > 1:
            manager.append_slots(seq)  # room for the last iteration's tokens, in one call
        seq.append_token()
        if group.first_token_time is None:
            group.first_token_time = first_end
        if seq.num_generated >= group.output_len:
            scheduler.finish_seq(seq)
    return now, k


def _add_memory(memory, manager, groups, ns: list[int], k: int, paged: bool) -> None:
    """Add the breakdown of iterations ``0..k-1`` (sequence ``i`` holds ``ns[i] + j`` tokens at
    iteration ``j``), as :meth:`memory_usage` of the manager would report it each time."""
    used = reserved = internal = 0
    tri = k * (k - 1) // 2
    for group, n in zip(groups, ns):
        final_len = group.prompt_len + group.output_len
        used_i = k * n + tri
        if paged:
            bs = manager.block_size
            alloc_sum = bs * (ceil_sum(n + k - 1, bs) - ceil_sum(n - 1, bs))
            last_alloc = -(-final_len // bs) * bs  # slots once the final block is allocated
            count = max(0, n + k - 1 - max(n - 1, last_alloc - bs))  # iterations in that block
            excess = count * (last_alloc - final_len)  # allocated slots beyond final_len
            used, reserved, internal = used + used_i, reserved + alloc_sum - excess - used_i, internal + excess
        else:
            size = manager.reservations[group.seqs[0].seq_id][1]
            will_use = min(size, final_len)
            used, reserved, internal = used + used_i, reserved + k * will_use - used_i, internal + k * (size - will_use)
    memory.add_sums(k, used, reserved, internal, k * manager.num_total_slots)

