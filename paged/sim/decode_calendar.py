"""The serving loop with decode token counts kept by a calendar (simulator speed, §6).

In a simulated decode iteration every running sequence gains one token, and almost nothing else
happens: a sequence needs a new KV block only when its token count passes a multiple of the block
size (one iteration in ``block_size``), and it finishes at a known iteration (its request's output
length). :class:`CalendarServingLoop` serves exactly as :class:`paged.core.serving_loop.ServingLoop`
with the simulated executor, but does not touch every sequence in every decode iteration:

* a global decode counter ``G`` counts the decode iterations run; a running sequence's generated
  tokens are ``G - offset`` (its offset fixed when it joined the running batch), written into the
  sequence only when something reads it;
* the sequences whose next decode crosses a block boundary are kept in ``block_size`` buckets by
  ``G mod block_size``; at each decode iteration only that bucket's sequences are brought up to date
  and given their new block by the KV cache manager (``append_slots``), so every block a sequence
  holds is the manager's own and the free pool is exact at every admission decision;
* the requests finishing at each value of ``G`` are kept in a dict;
* the batch's context tokens (the cost model's input) are a running sum.

A decode step then costs O(1 + crossings + finishes) instead of O(running sequences), and a prefill
step O(admitted requests). Everything else (the prefill admission, preemption, swapping) is the real
:class:`~paged.core.scheduler.Scheduler`'s: a step that is not a plain decode in which every crossing
finds a free block — a decode that must preempt, anything swapped out, no running request — brings
every sequence up to date and runs :meth:`ServingLoop.step` itself; the calendar is rebuilt after it.

The steps are the step-by-step loop's with its fast-forward (:mod:`paged.sim.fast_forward`): a decode
step runs the same iterations (until an arrival is due, a request finishes, or a crossing finds no
free block), the clock adds the same per-iteration times in the same order, and the result's sums
add the same numbers, so every result is bit-identical (``tests/sim/test_decode_calendar.py``).
Only the physical block ids a sequence gets may differ (blocks are taken in another order), which
nothing measured depends on.

Used by :func:`paged.sim.simulator.simulate` when it applies (:func:`applies`): requests of one
sequence each without a shared prefix, no prefix cache, no memory or sharing recording, a time model
with ``decode_time``. A block-table manager's tables may hold fewer tokens than their sequences
between crossings (the blocks are there): the manager grows them to the sequence's count when asked.
"""

from __future__ import annotations

from paged.core.scheduler import SchedulerOutputs
from paged.core.serving_loop import ServingLoop
from paged.core.sequence import SequenceGroup

__all__ = ["CalendarServingLoop", "applies"]


def applies(groups, kv_manager, executor, *, record_memory: bool, record_sharing: bool) -> bool:
    """Whether :class:`CalendarServingLoop` can serve ``groups`` (module docstring). O(groups)."""
    if record_memory or record_sharing or getattr(executor, "decode_time", None) is None:
        return False
    if getattr(kv_manager, "enable_prefix_caching", False):
        return False
    return all(len(g.seqs) == 1 and not g.prefix_len and g.max_num_seqs <= 1 and getattr(g, "beam", None) is None
               for g in groups)


class CalendarServingLoop(ServingLoop):
    """:class:`~paged.core.serving_loop.ServingLoop` whose decode steps follow a calendar (module
    docstring); the same arguments, the same results. Needs an executor with ``decode_time``
    (:class:`paged.sim.executor.SimulatedExecutor` over a cost model) and groups for which
    :func:`applies`."""

    __slots__ = ("_g", "_offset", "_finish_at", "_buckets", "_context", "_block_size", "_allocates")

    def __init__(self, scheduler, executor, groups, **kwargs) -> None:
        super().__init__(scheduler, executor, groups, **kwargs)
        manager = scheduler.kv_manager
        self._block_size = manager.block_size
        # A contiguous reservation already holds every token its request will write: no decode allocates.
        self._allocates = getattr(manager, "decode_allocates", True)
        self._g = 0
        self._offset: dict = {}  # running sequence -> G - its generated tokens
        self._finish_at: dict[int, list[SequenceGroup]] = {}  # G at which they finish -> groups
        self._buckets = [[] for _ in range(self._block_size)]  # G mod block_size -> groups crossing then
        self._context = 0  # Σ tokens of the running sequences

    # -- the calendar ------------------------------------------------------------------
    def _join(self, group: SequenceGroup) -> None:
        """Put a running group (one sequence, up to date) on the calendar."""
        seq = group.seqs[0]
        g = self._g
        off = g - seq.num_generated
        self._offset[seq] = off
        self._finish_at.setdefault(off + group.output_len, []).append(group)
        if self._allocates:
            # The next decode of a sequence with room for num_tokens - 1 tokens in whole blocks needs a
            # block when (num_tokens - 1) is a multiple of the block size: at G ≡ off + 1 - prompt.
            self._buckets[(off + 1 - seq.prompt_len) % self._block_size].append(group)
        self._context += seq.prompt_len + seq.num_generated

    def _sync(self) -> None:
        """Bring every running sequence's token count up to date and empty the calendar."""
        g = self._g
        for seq, off in self._offset.items():
            seq.num_generated = g - off
        self._offset.clear()
        self._finish_at.clear()
        for bucket in self._buckets:
            bucket.clear()
        self._context = 0

    def _rebuild(self) -> None:
        for group in self.scheduler.running:
            self._join(group)

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
            if scheduler.waiting and not scheduler.swapped:
                outputs = scheduler.schedule_prefills()
                if outputs.scheduled_seq_groups:
                    return self._prefill(outputs, now)
            if scheduler.running and not scheduler.swapped:
                finished = self._decode(now, groups[nxt].arrival_time if nxt < num_groups else float("inf"))
                if finished is not None:
                    return finished
            self._sync()
            finished = ServingLoop.step(self)
            self._rebuild()
            return finished
        except BaseException:
            self._sync()
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
        any_finished = executor.execute(scheduler, outputs)
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
        """A decode step by the calendar: the first iteration, then the following ones while no
        request arrives or finishes and every crossing finds a free block (the fast-forward's run).
        None, changing nothing, if the first iteration's crossings do not all find a free block."""
        scheduler, executor, result = self.scheduler, self.executor, self.result
        manager = scheduler.kv_manager
        offset, buckets, bs = self._offset, self._buckets, self._block_size
        g = self._g
        free = -1  # free blocks, read when a crossing needs them
        bucket = buckets[g % bs]
        if bucket:
            free = (manager.num_total_slots - manager.num_used_slots) // bs
            if len(bucket) > free:  # the scheduler preempts
                return None if scheduler.preemption_mode == "swap" else self._preempting_decode(now, next_arrival)
            free -= self._cross(bucket, g, manager)
        n = len(scheduler.running)
        finish_at = self._finish_at
        decode_time = executor.decode_time
        context = self._context
        t = now + decode_time(n, context)
        context += n
        g += 1
        k = 1
        if g not in finish_at:
            while next_arrival > t:
                bucket = buckets[g % bs]
                if bucket:
                    if free < 0:
                        free = (manager.num_total_slots - manager.num_used_slots) // bs
                    if len(bucket) > free:
                        break  # the next iteration would need more blocks than are free
                    free -= self._cross(bucket, g, manager)
                t += decode_time(n, context)
                context += n
                g += 1
                k += 1
                if g in finish_at:
                    break
        self._g = g
        executor.now = t
        result.num_iterations += k
        result.batched_requests_sum += k * n
        busy = t - now
        result.busy_seconds += busy
        result.batched_requests_seconds += busy * n
        return self._finish(g, context)

    def _preempting_decode(self, now: float, next_arrival: float) -> list[SequenceGroup]:
        """The first decode iteration needs more blocks than are free: the scheduler's decode step
        (:meth:`~paged.core.scheduler.Scheduler.schedule_decodes`, recomputation) on the sequences that
        need a block: walking the running groups in order, each crossing takes a free block, and when
        none is left the latest-arriving group is preempted (the crossing one itself when it is the
        latest) until it fits. Groups that cross nothing need nothing and are kept. Then one iteration,
        as :meth:`ServingLoop.step` with the simulated executor runs it; the calendar drops the
        preempted groups."""
        scheduler, executor, result = self.scheduler, self.executor, self.result
        manager = scheduler.kv_manager
        offset = self._offset
        g = self._g
        bs = self._block_size
        running = scheduler.running
        outputs = SchedulerOutputs([], is_prefill=False)
        crossing = sorted((running.index(group), group) for group in self._buckets[g % bs])
        hi = len(running)
        free = (manager.num_total_slots - manager.num_used_slots) // bs
        for pos, group in crossing:
            seq = group.seqs[0]
            if pos >= hi:
                break  # preempted already
            while not free:
                hi = hi - 1 if hi - 1 > pos else pos
                victim = running[hi]
                vseq = victim.seqs[0]
                vseq.num_generated = g - offset[vseq]
                scheduler.preempt(victim, outputs)
                free = (manager.num_total_slots - manager.num_used_slots) // bs
                if hi == pos:
                    break
            if hi <= pos:
                break
            seq.num_generated = g - offset[seq]
            manager.append_slots(seq)
            free -= 1
        del running[hi:]
        outputs.scheduled_seq_groups = list(running)
        bs = self._block_size
        context = self._context
        for group in outputs.preempted:
            seq = group.seqs[0]
            off = offset.pop(seq)
            due = self._finish_at[off + group.output_len]
            due.remove(group)
            if not due:  # an empty entry would end the next decode run there
                del self._finish_at[off + group.output_len]
            if self._allocates:
                self._buckets[(off + 1 - seq.prompt_len) % bs].remove(group)
            context -= seq.prompt_len + seq.num_generated
        self._context = context
        n = len(outputs.scheduled_seq_groups)
        if not n:  # every running group was preempted: ServingLoop.step waits for the next arrival
            if next_arrival == float("inf"):
                raise RuntimeError("the scheduler could run no request although some remain and none is left "
                                   "to arrive (a request larger than the free KV cache?)")
            executor.wait_until(max(now, next_arrival))
            return []
        t = now + executor.decode_time(n, context)
        self._g = g + 1
        executor.now = t
        result.num_iterations += 1
        result.batched_requests_sum += n
        busy = t - now
        result.busy_seconds += busy
        result.batched_requests_seconds += busy * n
        return self._finish(g + 1, context + n)

    def _finish(self, g: int, context: int) -> list[SequenceGroup]:
        """After the decode that brought the counter to ``g`` (the running sequences' tokens now total
        ``context``): finish the requests due at ``g`` and retire them."""
        ending = self._finish_at.pop(g, None)
        if ending is None:
            self._context = context
            return []
        scheduler = self.scheduler
        finish = scheduler.finish_seq
        offset, buckets, bs = self._offset, self._buckets, self._block_size
        for group in ending:
            seq = group.seqs[0]
            del offset[seq]
            seq.num_generated = group.output_len
            context -= seq.prompt_len + seq.num_generated
            if self._allocates:
                buckets[(g - group.output_len + 1 - seq.prompt_len) % bs].remove(group)
            finish(seq)
        self._context = context
        return self._retire(scheduler.free_finished_seq_groups(ending))

    def _cross(self, bucket: list, g: int, manager) -> int:
        """The sequences of ``bucket`` cross a block boundary in the decode at ``G = g``: bring them up
        to date and let the manager give each its block. Returns how many."""
        offset = self._offset
        append_slots = manager.append_slots
        for group in bucket:
            seq = group.seqs[0]
            seq.num_generated = g - offset[seq]
            append_slots(seq)
        return len(bucket)

    def _retire(self, finished: list[SequenceGroup]) -> list[SequenceGroup]:
        now = self.executor.now
        for group in finished:
            group.finished_time = now
        if finished and self.on_finish is not None:
            self.on_finish(finished)
        return finished
