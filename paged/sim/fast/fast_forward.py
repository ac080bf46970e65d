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
closed form (integers, so exactly). Both the block limit and the closed form belong to the fast KV
cache managers (``decode_run_limit``, ``decode_run_usage``, :mod:`paged.sim.fast.manager`), so this
module knows no manager's insides. A group of parallel samples runs like its sequences
side by side: they share only full blocks (their prompt's; the partly filled last one was copied in
an iteration that copied, which is not eligible), so each writes into blocks of its own. Beam groups
(candidates fork and drop every iteration) are not eligible: the caller steps.
"""

from __future__ import annotations

from paged.core.scheduler import Scheduler, SchedulerOutputs
from paged.core.sequence import SequenceStatus
from paged.sim.executor import check_seconds
from paged.sim.iteration_cost import IterationCostModel

__all__ = ["decode_run"]


def decode_run(
    scheduler: Scheduler,
    outputs: SchedulerOutputs,
    time_model: IterationCostModel,
    now: float,
    next_arrival_time: float,
    memory=None,
    first_iteration: int = 1,
) -> tuple[float, int] | None:
    """Apply the scheduled decode iteration and every following one that would be identical.

    Args:
        scheduler: the scheduler that produced ``outputs`` (its manager is used).
        outputs: a decode iteration just returned by ``scheduler.schedule()``.
        time_model: its ``decode_time(num_seqs, context_tokens)`` gives one iteration's seconds.
        now: the clock when the first iteration starts (seconds).
        next_arrival_time: when the next request arrives (seconds; ``inf`` if none).
        memory: a :class:`paged.core.metrics.MemoryStats` to add the run's breakdown to, or None.
        first_iteration: the number of the run's first iteration (what a time error names).

    Returns:
        ``(clock after the run, k iterations applied)``; finished sequences are finished
        (``finish_seq``) but their groups are left for ``free_finished_seq_groups``. ``None``
        (nothing changed) if the iteration is not eligible: it preempted, swapped or copied,
        a group replays a beam search, or a group's running sequences differ in length.

    Raises:
        InvalidTimeError: if the iterations' times do not add up to a finite, non-negative span.
    """
    if outputs.preempted or outputs.blocks_to_swap_in or outputs.blocks_to_swap_out or outputs.blocks_to_copy:
        return None
    manager = scheduler.kv_manager
    groups = outputs.scheduled_seq_groups
    seqs = []  # every running sequence, in batch order
    ns = [] if memory is not None else None  # tokens of each group's running sequences (the memory sums)
    kmax = None
    context = 0
    running = SequenceStatus.RUNNING
    append = seqs.append
    for group in groups:
        if getattr(group, "beam", None) is not None:
            return None
        members = group.seqs
        if len(members) == 1:  # the common case, inline
            seq = members[0]
            append(seq)
            n = seq.prompt_len + seq.num_generated
            context += n
        else:
            members = [s for s in members if s.status is running]
            seq = members[0]
            n = seq.num_tokens
            if any(s.num_tokens != n for s in members):
                return None
            seqs.extend(members)
            context += n * len(members)
        if ns is not None:
            ns.append(n)
        left = group.output_len - seq.num_generated
        if kmax is None or left < kmax:
            kmax = left
    num_seqs = len(seqs)
    decode_time = time_model.decode_time
    start = now
    # The clock, iteration by iteration, exactly as the step-by-step loop adds it.
    now += decode_time(num_seqs, context)
    first_end = now
    k = 1
    if kmax > 1 and next_arrival_time > now:  # a run longer than one iteration is possible
        kmax = manager.decode_run_limit(seqs, kmax)
        while k < kmax:
            context += num_seqs
            now += decode_time(num_seqs, context)
            k += 1
            if next_arrival_time <= now:
                break
    if not start <= now < float("inf"):  # a time model gave a negative, NaN or infinite time
        check_seconds(now - start, time_model, first_iteration)
    if memory is not None:
        memory.add_usage(manager.decode_run_usage(groups, ns, k), k)
    finish = scheduler.finish_seq
    append_slots = manager.append_slots
    for group in groups:
        if group.first_token_time is None:
            group.first_token_time = first_end
        output_len = group.output_len
        for seq in group.seqs:
            if seq.status is not running:
                continue
            if k > 1:
                seq.num_generated += k - 1
                append_slots(seq)  # room for the last iteration's tokens, in one call
            seq.num_generated += 1
            if seq.num_generated >= output_len:
                finish(seq)
    return now, k
