"""The serving loop with decode token counts kept by a calendar (simulator speed, §6).

In a simulated decode iteration every running sequence gains one token and almost nothing else happens:
a sequence needs a KV block only when its count passes a multiple of the block size, and it finishes at
a known iteration. :class:`CalendarServingLoop` serves exactly as the reference loop, touching only
what changes:

* a global decode counter ``G``: a running group's sequences have generated ``G - offset`` tokens
  (``offset`` fixed when it joined the batch), written into them only when something reads them;
* groups whose next decode crosses a block boundary wait in ``block_size`` buckets by
  ``G mod block_size``; at each decode only that bucket's one-sequence groups get their new blocks
  (``append_slots``), so the free pool is exact at every admission decision;
* a group of ``n`` samples keeps the tables it joined with: the blocks its crossings and its first
  copies on write take are held in the manager (``hold_blocks``) and written into its tables only
  before something reads them (a step of the reference loop, an abort);
* the groups finishing at each ``G``, the batch's sequences and its context tokens are running sums,
  so a decode step costs O(1 + crossings + finishes) instead of O(running sequences).

A decode step runs the fast-forward's iterations (until a request arrives or finishes, or a crossing
finds no free block), adding the same per-iteration times in the same order; one that must preempt is the
scheduler's walk over the groups needing blocks (:meth:`CalendarServingLoop._preempting_decode`). Swapped-out
groups (of samples, as vLLM swaps them) come back in order once the first fits, and a run's crossings only
shrink the free pool: a step whose appends leave it room is one iteration with the scheduler's swap-in
(:meth:`CalendarServingLoop._swap_in_decode`). The rest (preempting in swap mode; swapped groups while sharing
is recorded or with prefix caching; a run that could evict a cached block) is the fast-forward loop's.

Used by :func:`paged.sim.fast.serving_loop` where :func:`applies`: single sequences, parallel samples,
shared prefixes; no memory breakdown recorded. Results equal the reference's
(``tests/sim/fast/test_decode_calendar.py``); only physical block ids may differ.
"""

from __future__ import annotations

from collections.abc import Callable

from paged.core.scheduler import SchedulerOutputs
from paged.core.serving_loop import ServingLoop
from paged.core.sequence import SequenceGroup, SequenceStatus
from paged.sim.executor import check_seconds
from paged.sim.fast.loop import FastServingLoop

__all__ = ["CalendarServingLoop", "applies"]


def applies(groups, *, record_memory: bool) -> bool:
    """Whether :class:`CalendarServingLoop` can serve ``groups`` (module docstring): no memory breakdown
    recorded (sharing may be) and no group replaying a beam search. O(groups)."""
    return not record_memory and all(getattr(g, "beam", None) is None and g.max_num_seqs <= len(g.seqs)
                                     for g in groups)


class CalendarServingLoop(FastServingLoop):
    """:class:`~paged.core.serving_loop.ServingLoop` whose decode steps follow a calendar (module
    docstring); the same arguments, the same results. Needs the fast scheduler and manager
    (:mod:`paged.sim.fast.manager`), an executor over an ``IterationCostModel``, and groups for which
    :func:`applies`. With ``record_sharing`` the blocks held with and without sharing (Fig. 15) are
    summed per iteration in closed form (:meth:`_record_run`)."""

    __slots__ = ("_g", "_offset", "_finish_at", "_buckets", "_lazy_buckets", "_lazy_need", "_cow", "_lazy", "_held",
                 "_samples", "_context", "_blocks", "_block_size", "_allocates", "_caching", "_decode_times",
                 "_refused", "_swaps_in", "_swap_need")

    def __init__(self, scheduler, executor, groups, **kwargs) -> None:
        super().__init__(scheduler, executor, groups, **kwargs)
        manager = scheduler.kv_manager
        bs = self._block_size = manager.block_size
        # A contiguous reservation already holds every token its request will write: no decode allocates.
        self._allocates = manager.decode_allocates
        # A prefix cache's evictions depend on the order of allocations and frees, so with one, finishing
        # requests free in running order and a run that could evict is left to the fast loop.
        self._caching = self._allocates and manager.enable_prefix_caching
        self._g = 0
        self._offset: dict[SequenceGroup, int] = {}  # running group -> G - its sequences' generated tokens
        self._finish_at: dict[int, list[SequenceGroup]] = {}  # G at which they finish -> groups
        self._buckets = [[] for _ in range(bs)]  # G mod block_size -> one-sequence groups crossing then
        self._lazy_buckets = [[] for _ in range(bs)]  # G mod block_size -> groups of samples crossing then
        self._lazy_need = [0] * bs  # G mod block_size -> blocks the groups of samples crossing then take
        self._cow: list[SequenceGroup] = []  # groups whose first decode copies their shared last block
        # A group of samples on the paged manager keeps the tables it joined with; the blocks its crossings
        # and its first copies on write take are held in the manager (hold_blocks), written into its tables
        # only when something reads them (_write_tables). Group -> (its generated tokens then, copies due).
        self._lazy: dict[SequenceGroup, tuple[int, bool]] = {}
        self._held: list[int] = []  # blocks the manager holds for those groups
        self._samples = 0  # running sequences beyond one per running group (the samples past the first)
        self._context = 0  # Σ tokens of the running sequences
        # Σ blocks of the running sequences' tables as the step-by-step loop has them between iterations
        # (every sequence: ceil((tokens - 1) / block_size)), on a manager whose decodes allocate: the blocks
        # they would hold without sharing (Fig. 15, recorded with record_sharing).
        self._blocks = 0
        self._decode_times: dict[int, Callable[[int], float]] = {}  # batch size -> decode seconds of a context
        # The scheduler refused the head of the queue and nothing that could change that has happened since
        # (no request left the running batch): admission is not asked again (module docstring).
        self._refused = False
        # Decode steps go on by the calendar while groups are swapped out (:meth:`_swap_in_decode`), unless
        # the blocks held are recorded per iteration or a prefix cache's evictions depend on the order of
        # allocations: then the step-by-step loop serves every step while any group is swapped out.
        self._swaps_in = not self.record_sharing and not self._caching
        self._swap_need = None  # ((first swapped group, its preemptions), the free blocks it needs to come back)

    def _decode_time_of(self, num_seqs: int) -> Callable[[int], float]:
        """The time model's decode seconds of ``num_seqs`` sequences as a function of the context tokens
        (its ``decode_time_of``, made once per batch size; the same seconds as ``decode_time``)."""
        fn = self._decode_times.get(num_seqs)
        if fn is None:
            fn = self._decode_times[num_seqs] = self.executor.iteration_time.decode_time_of(num_seqs)
        return fn

    def _check_clock(self, start: float, end: float) -> None:
        """Refuse a run of decode iterations whose times do not add up to a finite, non-negative span
        (:class:`paged.sim.executor.InvalidTimeError`, naming the time model and the run's first iteration)."""
        if not start <= end < float("inf"):
            check_seconds(end - start, self.executor.iteration_time, self.result.num_iterations + 1)

    def _one_iteration(self, now: float, swapped: int, copies: int, num_seqs: int, context: int, n: int) -> float:
        """Charge one decode iteration starting at ``now`` (s), as the time model prices it: ``swapped`` blocks
        moved and ``copies`` blocks copied on write before the decode of ``num_seqs`` sequences holding
        ``context`` tokens, in that order of addition (the same float sum); ``n`` groups batched. Moves the
        clock and the result's counters; returns the iteration's end (s)."""
        executor, result = self.executor, self.result
        cost = executor.iteration_time
        t = 0.0
        if swapped:
            t += cost.swap_time(swapped)
        if copies:
            seconds = cost.block_copy_time(copies)
            t += seconds
            executor.cow_blocks += copies
            executor.cow_seconds += seconds
        t = now + (t + self._decode_time_of(num_seqs)(context))
        self._check_clock(now, t)
        executor.now = t
        result.num_iterations += 1
        result.batched_requests_sum += n
        busy = t - now
        result.busy_seconds += busy
        result.batched_requests_seconds += busy * n
        return t

    # -- the calendar ------------------------------------------------------------------
    def _join(self, group: SequenceGroup) -> None:
        """Put a running group (its sequences up to date, all with the same tokens, its tables the manager's)
        on the calendar."""
        seqs = group.seqs
        width = len(seqs)
        seq = seqs[0]
        generated = seq.num_generated
        off = self._g - generated
        self._offset[group] = off
        self._finish_at.setdefault(off + group.output_len, []).append(group)
        if width == 1:  # the common case, inline
            if self._allocates:
                # The next decode of a sequence with room for num_tokens - 1 tokens in whole blocks needs a
                # block when (num_tokens - 1) is a multiple of the block size: at G ≡ off + 1 - prompt.
                self._buckets[(off + 1 - seq.prompt_len) % self._block_size].append(group)
                self._blocks += -(-(seq.prompt_len + generated - 1) // self._block_size)
            self._context += seq.prompt_len + generated
            return
        if self._allocates:  # a group of samples: its blocks past its tables are held (class docstring)
            i = (off + 1 - seq.prompt_len) % self._block_size
            self._lazy_buckets[i].append(group)
            self._lazy_need[i] += width
            # Prefilled once, not decoded yet: the samples share the prompt's partly filled last block.
            cow = generated == 1 and seq.prompt_len % self._block_size > 0
            if cow:
                self._cow.append(group)
            self._lazy[group] = (generated, cow)
            self._blocks += width * -(-(seq.prompt_len + generated - 1) // self._block_size)
        self._samples += width - 1
        self._context += width * (seq.prompt_len + generated)

    def _held_for(self, group: SequenceGroup, generated: int) -> int:
        """Blocks held for a group of samples (:attr:`_lazy`) whose sequences have generated ``generated``
        tokens (the last not yet in the cache). O(1)."""
        joined, cow = self._lazy[group]
        seqs = group.seqs
        bs, prompt_len = self._block_size, seqs[0].prompt_len
        held = len(seqs) * (-(-(prompt_len + generated - 1) // bs) + (prompt_len + joined - 1) // -bs)
        return held + len(seqs) - 1 if cow and generated > joined else held

    def _release(self, count: int) -> None:
        """Give the manager back ``count`` of the blocks held (they are interchangeable)."""
        if count:
            held = self._held
            self.scheduler.kv_manager.release_blocks(held[-count:])
            del held[-count:]

    def _write_tables(self, group: SequenceGroup, generated: int) -> None:
        """Write a group of samples' held blocks into its sequences' tables: each gets the blocks of
        ``prompt_len + generated - 1`` tokens, the first copies of its shared last block (all samples but the
        last) included. O(blocks)."""
        seqs = group.seqs
        count = self._held_for(group, generated)
        joined, cow = self._lazy.pop(group)
        if not count:
            return
        manager = self.scheduler.kv_manager
        held = self._held[-count:]
        del self._held[-count:]
        pool = iter(held)
        tokens = seqs[0].prompt_len + generated - 1
        blocks = -(-tokens // self._block_size)
        tables = []
        for i, seq in enumerate(seqs):
            table = manager.get_block_table(seq)
            if cow and i < len(seqs) - 1:
                table.pop()  # the shared last block: the last sample writes it, the others a copy
            tables.append((seq, table + [next(pool) for _ in range(blocks - len(table))], tokens))
        manager.replace_tables(tables, held=held)

    def _leave(self, group: SequenceGroup) -> None:
        """Take a running group off the calendar (its sequences up to date, its held blocks given back)."""
        seqs = group.seqs
        seq = seqs[0]
        off = self._offset.pop(group)
        due = self._finish_at[off + group.output_len]
        due.remove(group)
        if not due:  # an empty entry would end the next decode run there
            del self._finish_at[off + group.output_len]
        if self._allocates:
            self._blocks -= len(seqs) * -(-(seq.num_tokens - 1) // self._block_size)
            i = (off + 1 - seq.prompt_len) % self._block_size
            if len(seqs) == 1:
                self._buckets[i].remove(group)
            else:
                self._lazy_buckets[i].remove(group)
                self._lazy_need[i] -= len(seqs)
                self._lazy.pop(group, None)
                if group in self._cow:
                    self._cow.remove(group)
        self._samples -= len(seqs) - 1
        self._context -= len(seqs) * seq.num_tokens

    def _clear(self) -> None:
        """Bring every running sequence's token count up to date and empty the calendar."""
        g = self._g
        for group, off in self._offset.items():
            for seq in group.seqs:
                seq.num_generated = g - off
        self._offset.clear()
        self._finish_at.clear()
        bs = self._block_size
        self._buckets = [[] for _ in range(bs)]
        self._lazy_buckets = [[] for _ in range(bs)]
        self._lazy_need = [0] * bs
        self._cow.clear()
        self._lazy.clear()
        self._samples = self._context = self._blocks = 0
        self._refused = False

    def _sync(self) -> None:
        """Bring every running sequence up to date (token counts; the held blocks written into the tables)
        and empty the calendar."""
        g = self._g
        for group in list(self._lazy):
            self._write_tables(group, g - self._offset[group])
        self._clear()

    def _rebuild(self) -> None:
        for group in self.scheduler.running:
            self._join(group)

    def abandon(self) -> list[SequenceGroup]:
        """:meth:`ServingLoop.abandon` after giving the manager back the blocks held past the tables and
        bringing the token counts up to date (the aborted requests then free everything they hold)."""
        self._release(len(self._held))
        self._clear()
        return ServingLoop.abandon(self)

    def abort_request(self, request_id) -> bool:
        """:meth:`ServingLoop.abort_request` on up-to-date sequences (the calendar is rebuilt after)."""
        self._sync()
        try:
            return ServingLoop.abort_request(self, request_id)
        finally:
            self._rebuild()

    # -- one step ----------------------------------------------------------------------
    def step(self) -> list[SequenceGroup]:
        """One step (module docstring): a prefill, a decode step by the calendar, or, for anything
        else, :meth:`ServingLoop.step` on up-to-date sequences. Whatever escapes it aborts every
        request of the loop first (:meth:`abandon`)."""
        try:
            scheduler, groups = self.scheduler, self.groups
            num_groups = len(groups)
            now = self.executor.now
            nxt = self._admit_arrivals()
            if scheduler.waiting and not scheduler.swapped and not self._refused:
                outputs = scheduler.schedule_prefills()
                if outputs.scheduled_seq_groups:
                    return self._prefill(outputs, now)
                self._refused = True
            if scheduler.running and (not scheduler.swapped or self._swaps_in):
                finished = self._decode(now, groups[nxt].arrival_time if nxt < num_groups else float("inf"))
                if finished is not None:
                    return finished
            self._sync()
            finished = ServingLoop.step(self)
            self._rebuild()
            return finished
        except BaseException:
            self.abandon()
            raise

    def _prefill(self, outputs, now: float) -> list[SequenceGroup]:
        """A prefill iteration, as :meth:`ServingLoop.step` runs it; its groups join the calendar."""
        scheduler, executor, result = self.scheduler, self.executor, self.result
        scheduled = outputs.scheduled_seq_groups
        for group in scheduled:
            if group.first_scheduled_time is None:
                group.first_scheduled_time = now
        self._count_prefill(outputs)
        if self.record_sharing:
            self._record_prefill(scheduled)
        any_finished = executor.execute(scheduler, outputs)
        scheduler.kv_manager.commit_computed()  # the KV of the prompt blocks this prefill registered is written
        result.num_iterations += 1
        result.batched_requests_sum += len(scheduled)
        busy = executor.now - now
        result.busy_seconds += busy
        result.batched_requests_seconds += busy * len(scheduled)
        finished = scheduler.free_finished_seq_groups(scheduled) if any_finished else []
        for group in scheduled:
            if group.seqs[0].num_generated < group.output_len:
                self._join(group)
        return self._retire(finished)

    def _decode(self, now: float, next_arrival: float) -> list[SequenceGroup] | None:
        """A decode step by the calendar: the first iteration, then, unless it copied blocks on write, the
        following ones while no request arrives or finishes and every crossing finds a free block (the
        fast-forward's run); with ``record_sharing``, its sharing counts in closed form (:meth:`_record_run`)
        and its busy seconds iteration by iteration (:meth:`_add_busy`). None, changing nothing, if the first
        iteration's blocks are not all free and the scheduler would preempt by swapping, or if a prefix cache
        could evict otherwise than the step-by-step loop (its evictions depend on the order of allocations
        and frees)."""
        scheduler, executor, result = self.scheduler, self.executor, self.result
        manager = scheduler.kv_manager
        buckets, lazy_needs, bs = self._buckets, self._lazy_need, self._block_size
        finish_at = self._finish_at
        g0 = g = self._g
        cow = self._cow
        free = -1  # free blocks, read when a crossing needs them
        copies = first = 0  # the first iteration's copies on write and crossings' blocks
        if self._allocates:
            need = first = len(buckets[g % bs]) + lazy_needs[g % bs]
            for group in cow:
                copies += len(group.seqs) - 1
            need += copies
            if need:
                free = (manager.num_total_slots - manager.num_used_slots) // bs
                if need > free:  # the scheduler preempts
                    return None if scheduler.preemption_mode == "swap" else self._preempting_decode(now, next_arrival)
                free -= need
        if scheduler.swapped and self._swap_in_due(first + copies):
            return self._swap_in_decode(now, copies)
        n = len(scheduler.running) + self._samples
        decode_time = self._decode_time_of(n)
        context = self._context
        crossed = [g] if free >= 0 else []  # the iterations whose crossings take blocks
        later = 0  # blocks the crossings after the first iteration take
        if copies:  # the first iteration copies blocks: a step of its own
            seconds = executor.iteration_time.block_copy_time(copies)
            t = now + (seconds + decode_time(context))
            executor.cow_blocks += copies
            executor.cow_seconds += seconds
            cow.clear()
            context += n
            g += 1
            k = 1
        else:
            t = now + decode_time(context)
            context += n
            g += 1
            k = 1
            if g not in finish_at:
                while next_arrival > t:
                    need = len(buckets[g % bs]) + lazy_needs[g % bs]
                    if need:
                        if free < 0:
                            free = (manager.num_total_slots - manager.num_used_slots) // bs
                        if need > free:
                            break  # the next iteration would need more blocks than are free
                        free -= need
                        later += need
                        crossed.append(g)
                    t += decode_time(context)
                    context += n
                    g += 1
                    k += 1
                    if g in finish_at:
                        break
            allocator = manager.gpu_allocator if self._caching else None
            if later and allocator is not None and later + len(buckets[g0 % bs]) + lazy_needs[g0 % bs] > \
                    allocator.num_free_blocks - allocator.num_evictable_blocks:
                return None  # the run's crossings could evict cached blocks: the step-by-step loop's order decides
        recording = self.record_sharing
        if recording:  # the run's sharing counts, read before its crossings change the manager
            self._record_run(k, g0, crossed, copies)
        hold = copies
        for i in crossed:
            if buckets[i % bs]:
                self._cross(buckets[i % bs], i, manager)
            hold += lazy_needs[i % bs]
        if hold:
            self._held += manager.hold_blocks(hold)
        self._blocks += first + later  # the tables' blocks: a copy replaces a shared entry
        self._g = g
        self._check_clock(now, t)
        executor.now = t
        result.num_iterations += k
        num_groups = len(scheduler.running)
        result.batched_requests_sum += k * num_groups
        if recording:  # the step-by-step loop, without fast-forward, adds each iteration's busy seconds
            self._add_busy(now, t, k, context - k * n, n, copies, num_groups)
        else:
            busy = t - now
            result.busy_seconds += busy
            result.batched_requests_seconds += busy * num_groups
        return self._finish(g, context)

    def _swap_in_due(self, taken: int) -> bool:
        """Whether the scheduler brings the first swapped-out group back after this iteration's appends, which
        take ``taken`` free blocks (:meth:`~paged.core.scheduler.Scheduler.schedule_swap_in`'s test: room in
        ``max_num_seqs`` and its blocks free). If not, it does not during the run either: the run's crossings
        only take blocks, and the batch stays the same. O(1) for a group asked about before, else O(blocks)
        (the blocks it needs, kept while it stays swapped out), plus O(running groups) when its blocks fit."""
        scheduler = self.scheduler
        head = scheduler.swapped[0]
        key = (head, head.num_preemptions)  # a group swapped out again needs another number of blocks
        if self._swap_need is None or self._swap_need[0] != key:
            self._swap_need = (key, scheduler.kv_manager.swap_in_blocks(head))
        manager = scheduler.kv_manager
        if self._swap_need[1] > manager.get_num_free_gpu_blocks() - taken:
            return False
        width = max(head.peak_num_seqs, head.num_seqs(SequenceStatus.SWAPPED))
        return scheduler.num_reserved_seqs() + width <= scheduler.max_num_seqs

    def _swap_in_decode(self, now: float, copies: int) -> list[SequenceGroup]:
        """One decode iteration in which the first swapped-out group comes back (:meth:`_swap_in_due`), as
        :meth:`~paged.core.scheduler.Scheduler.schedule_decodes` runs it when nothing is preempted: the
        running groups take their blocks (crossings at this ``G``; ``copies`` first copies on write, which
        the caller found free), then the scheduler brings swapped groups back while they fit
        (:meth:`~paged.core.scheduler.Scheduler.schedule_swap_in`, on the manager's exact free pool), and one
        iteration of every running sequence runs, priced as the time model prices it (swaps in, every copy
        on write, the decode). The groups swapped in gain their token, finish or join the calendar. One
        iteration, as the fast-forward takes one (a swap is not a run's). Not with
        ``record_sharing`` or a prefix cache (:attr:`_swaps_in`)."""
        scheduler = self.scheduler
        manager = scheduler.kv_manager
        g, bs = self._g, self._block_size
        first = 0
        if self._allocates:
            bucket = self._buckets[g % bs]
            first = len(bucket) + self._lazy_need[g % bs]
            if bucket:
                self._cross(bucket, g, manager)
            hold = copies + self._lazy_need[g % bs]
            if hold:
                self._held += manager.hold_blocks(hold)
            self._cow.clear()  # every copying group copies now
        before = len(scheduler.running)
        swapped = list(scheduler.swapped)
        outputs = SchedulerOutputs([], is_prefill=False)
        scheduler.schedule_swap_in(outputs)
        back = swapped[:len(swapped) - len(scheduler.swapped)]  # first out, first in
        running = SequenceStatus.RUNNING
        num_seqs, context = before + self._samples, self._context  # the calendar's sequences, then the others
        for group in back:
            for seq in group.seqs:
                if seq.status is running:
                    num_seqs += 1
                    context += seq.num_tokens
        self._refused = False  # the batch changed (a refused head still does not fit: asked again all the same)
        self._blocks += first
        self._g = g + 1
        t = self._one_iteration(now, len(outputs.blocks_to_swap_in), copies + len(outputs.blocks_to_copy), num_seqs,
                                context, len(scheduler.running))
        done, joining = [], []
        for group in back:
            if group.first_token_time is None:
                group.first_token_time = t
            for seq in group.seqs:
                if seq.status is running:
                    seq.num_generated += 1
                    if seq.num_generated >= group.output_len:
                        scheduler.finish_seq(seq)
            (done if group.is_finished() else joining).append(group)
        finished = self._finish(g + 1, self._context + before + self._samples, done)
        for group in joining:
            self._join(group)
        return finished

    def _add_busy(self, now: float, end: float, k: int, context: int, n: int, copies: int, num_groups: int) -> None:
        """Add the busy seconds of a run of ``k`` decode iterations of ``n`` sequences from ``now`` to ``end``
        (``context`` tokens in the first, ``copies`` copies on write before it) iteration by iteration, as
        :meth:`ServingLoop.step` adds them when it steps: each iteration's end is computed again with the
        same float additions as the run (so the last is ``end``). O(k)."""
        decode_time = self._decode_time_of(n)
        result = self.result
        if copies:
            t = now + (self.executor.iteration_time.block_copy_time(copies) + decode_time(context))
        else:
            t = now + decode_time(context)
        start = now
        for _ in range(k - 1):
            busy = t - start
            result.busy_seconds += busy
            result.batched_requests_seconds += busy * num_groups
            context += n
            start, t = t, t + decode_time(context)
        if t != end:
            raise RuntimeError(f"a run's iterations end at {t!r}, not at the clock's {end!r}")  # a bookkeeping error
        busy = t - start
        result.busy_seconds += busy
        result.batched_requests_seconds += busy * num_groups

    def _record_prefill(self, scheduled: list[SequenceGroup]) -> None:
        """Add a prefill iteration's sharing counts, as :meth:`ServingLoop.step` reads them once the groups
        are allocated (:meth:`~paged.block.PagedKVCacheManager.sharing_counts`): the blocks in use (exact:
        the blocks held past the tables are in use), and the blocks of the running groups' tables
        (:attr:`_blocks`) plus the new groups' (each running sequence ``ceil(tokens / block_size)``). A
        contiguous manager's counts are its own (never shared, and up to date). O(admitted sequences)."""
        manager = self.scheduler.kv_manager
        if not self._allocates:
            self.result.sharing.add(*manager.sharing_counts())
            return
        bs = self._block_size
        running = SequenceStatus.RUNNING
        new = 0
        for group in scheduled:
            for seq in group.seqs:
                if seq.status is running:
                    new += -(-seq.num_tokens // bs)
        self.result.sharing.add(manager.blocks_in_use(), self._blocks + new)

    def _record_run(self, k: int, g0: int, crossed: list[int], copies: int) -> None:
        """Add the sharing counts of the ``k`` decode iterations from ``G = g0`` in closed form, before their
        crossings and copies reach the manager: every iteration holds the blocks in use at the start plus
        the blocks the crossings up to it took (the first iteration's copies on write too), and its tables
        :attr:`_blocks` plus the crossings' blocks (a copy replaces a shared entry: no new one); a crossing
        at ``G = i`` is held by the ``g0 + k - i`` iterations from it. On a contiguous manager both counts
        are its reservations, unchanged by a decode. O(crossings)."""
        manager = self.scheduler.kv_manager
        if not self._allocates:
            in_use, without = manager.sharing_counts()
            self.result.sharing.add_sums(k * in_use, k * without, k)
            return
        buckets, lazy_needs, bs, end = self._buckets, self._lazy_need, self._block_size, g0 + k
        weighted = 0  # Σ over the crossings of their blocks × the iterations that hold them
        for i in crossed:
            weighted += (len(buckets[i % bs]) + lazy_needs[i % bs]) * (end - i)
        self.result.sharing.add_sums(k * (manager.blocks_in_use() + copies) + weighted, k * self._blocks + weighted,
                                     k)

    def _preempting_decode(self, now: float, next_arrival: float) -> list[SequenceGroup]:
        """The first decode iteration needs more blocks than are free: the scheduler's decode step
        (:meth:`~paged.core.scheduler.Scheduler.schedule_decodes`) on the groups that need blocks
        (crossings, first copies on write): walking the running groups in order, each takes what it needs,
        and while it does not fit the latest-arriving group is preempted by the scheduler (the needy one
        itself when it is the latest; a group of samples has its tables written out first: it is
        recomputed, or swapped out as vLLM swaps groups). Groups that need nothing are kept. Then one iteration, as :meth:`ServingLoop.step` with the simulated executor runs it
        (recording its sharing counts once the victims are gone and the blocks taken); the calendar drops the
        preempted groups."""
        scheduler, executor, result = self.scheduler, self.executor, self.result
        manager = scheduler.kv_manager
        offset = self._offset
        g = self._g
        bs = self._block_size
        running = scheduler.running
        outputs = SchedulerOutputs([], is_prefill=False)
        self._refused = False  # preempted groups go back to the head of the queue
        cow = set(self._cow)
        needy = self._buckets[g % bs]
        if self._lazy_buckets[g % bs] or cow:
            needy = [*needy, *self._lazy_buckets[g % bs], *cow]
        needy = sorted((running.index(group), group) for group in needy)
        hi = len(running)
        free = (manager.num_total_slots - manager.num_used_slots) // bs
        copies = 0
        grown = 0  # blocks the crossings add to the tables
        for pos, group in needy:
            if pos >= hi:
                break  # preempted already
            width = len(group.seqs)
            need = width - (group in cow)
            while free < need:
                hi = hi - 1 if hi - 1 > pos else pos
                victim = running[hi]
                generated = g - offset[victim]
                for seq in victim.seqs:
                    seq.num_generated = generated
                if victim in self._lazy:  # its tables as the reference has them: swapped or freed whole
                    self._write_tables(victim, generated)
                scheduler.preempt(victim, outputs)
                free = (manager.num_total_slots - manager.num_used_slots) // bs
                if hi == pos:
                    break
            if hi <= pos:
                break
            if width == 1:
                seq = group.seqs[0]
                seq.num_generated = g - offset[group]
                manager.append_slots(seq)
            else:
                self._held += manager.hold_blocks(need)
                if group in cow:
                    copies += need
            if group not in cow:
                grown += need
            free -= need
        del running[hi:]
        outputs.scheduled_seq_groups = list(running)
        finish_at, buckets = self._finish_at, self._buckets
        for group in outputs.preempted:
            if len(group.seqs) > 1:
                self._leave(group)
                continue
            seq = group.seqs[0]  # one sequence: _leave, inline
            off = offset.pop(group)
            due = finish_at[off + group.output_len]
            due.remove(group)
            if not due:  # an empty entry would end the next decode run there
                del finish_at[off + group.output_len]
            if self._allocates:
                buckets[(off + 1 - seq.prompt_len) % bs].remove(group)
                self._blocks -= -(-(seq.num_tokens - 1) // bs)
            self._context -= seq.prompt_len + seq.num_generated
        self._cow.clear()  # every copying group has copied or left
        n = len(outputs.scheduled_seq_groups)
        if not n:  # every running group was preempted: ServingLoop.step waits for the next arrival
            if next_arrival == float("inf"):
                raise RuntimeError("the scheduler could run no request although some remain and none is left "
                                   "to arrive (a request larger than the free KV cache?)")
            executor.wait_until(max(now, next_arrival))
            return []
        if self.record_sharing:  # as ServingLoop.step reads it: the crossings and copies taken, the victims gone
            result.sharing.add(manager.blocks_in_use(), self._blocks + grown)
        self._blocks += grown
        num_seqs, context = n + self._samples, self._context
        self._g = g + 1
        # a group of several sequences is swapped out in either preemption mode
        self._one_iteration(now, len(outputs.blocks_to_swap_out), copies, num_seqs, context, n)
        return self._finish(g + 1, context + num_seqs)

    def _finish(self, g: int, context: int, done: list[SequenceGroup] = ()) -> list[SequenceGroup]:
        """After the decode that brought the counter to ``g`` (the calendar's sequences' tokens now total
        ``context``): finish the requests due at ``g`` and retire them, with the groups of ``done`` (not on
        the calendar, their sequences finished already)."""
        ending = self._finish_at.pop(g, None)
        if ending is None:
            self._context = context
            if not done:
                return []
            ending = []
        self._refused = False  # their memory and sequences go back: the head of the queue may fit now
        scheduler = self.scheduler
        if self._caching and len(ending) > 1:  # freed in running order, as the step-by-step loop frees them
            ending.sort(key=scheduler.running.index)
        finish = scheduler.finish_seq
        offset, buckets, bs, allocates = self._offset, self._buckets, self._block_size, self._allocates
        blocks = self._blocks
        for group in ending:
            seqs = group.seqs
            del offset[group]
            length = group.output_len
            if len(seqs) == 1:  # the common case, inline
                seq = seqs[0]
                seq.num_generated = length
                if allocates:
                    buckets[(g - length + 1 - seq.prompt_len) % bs].remove(group)
                    blocks -= -(-(seq.prompt_len + length - 1) // bs)
                finish(seq)
                context -= seq.prompt_len + length
                continue
            for seq in seqs:
                seq.num_generated = length
            if allocates:
                i = (g - length + 1 - seqs[0].prompt_len) % bs
                self._lazy_buckets[i].remove(group)
                self._lazy_need[i] -= len(seqs)
                self._release(self._held_for(group, length))
                del self._lazy[group]
                blocks -= len(seqs) * -(-(seqs[0].prompt_len + length - 1) // bs)
            for seq in seqs:
                finish(seq)
            self._samples -= len(seqs) - 1
            context -= len(seqs) * seqs[0].num_tokens
        self._context = context
        self._blocks = blocks
        return self._retire(scheduler.free_finished_seq_groups([*ending, *done] if done else ending))

    def _cross(self, bucket: list, g: int, manager) -> None:
        """The one-sequence groups of ``bucket`` cross a block boundary in the decode at ``G = g``: bring
        them up to date and let the manager give each its block."""
        offset = self._offset
        append_slots = manager.append_slots
        for group in bucket:
            seq = group.seqs[0]
            seq.num_generated = g - offset[group]
            append_slots(seq)

    def _retire(self, finished: list[SequenceGroup]) -> list[SequenceGroup]:
        now = self.executor.now
        for group in finished:
            group.finished_time = now
        if finished and self.on_finish is not None:
            self.on_finish(finished)
        return finished
